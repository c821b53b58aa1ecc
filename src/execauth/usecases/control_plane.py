"""Control-plane use cases: organizations, API keys, policies — each change audited.

The console (platform admin, ``/console/v1``) and the operator surface (an
organization's own admin key, ``/operator``) are two doors to the same rooms;
both call these methods so validation, auditing and cache invalidation happen
once. Nothing here knows HTTP; failures are ``ExecauthError``s.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import anyio.to_thread

from execauth.errors import InvalidRequest, NotFound
from execauth.policy.decision import PolicyRef
from execauth.policy.document import parse_policy_document
from execauth.policy.engine import compile_policy
from execauth.tenancy.api_keys import (
    ROLES,
    ApiKey,
    generate_secret,
    hash_secret,
    new_key_id,
    validate_surface_patterns,
)
from execauth.tenancy.audit import AuditEvent, org_change_actions
from execauth.tenancy.orgs import ORG_NAME_MAX, WIRE_PROFILES, Org, new_org_id
from execauth.usecases.execute import ExecutionService

DEFAULT_ROTATION_GRACE = timedelta(hours=24)
MAX_ROTATION_GRACE = timedelta(days=30)
KEY_NAME_MAX = 256


class ControlPlane:
    def __init__(self, service: ExecutionService) -> None:
        self._service = service
        self._runtime = service.runtime
        self._control = service.runtime.control

    def _now(self) -> datetime:
        return self._service.clock()

    # organizations --------------------------------------------------------
    def check_org_fields(
        self, name: str | None, plan: str | None, wire_profile: str | None
    ) -> None:
        if name is not None and (not name.strip() or len(name) > ORG_NAME_MAX):
            raise InvalidRequest(f"name must be 1 to {ORG_NAME_MAX} characters")
        plans = self._runtime.plans
        if plan is not None and plan not in plans:
            raise InvalidRequest(f"unknown plan {plan!r} (known: {', '.join(plans)})")
        if wire_profile is not None and wire_profile not in WIRE_PROFILES:
            raise InvalidRequest("wire_profile must be 'a' or 'b'")

    async def existing_org(self, org_id: str) -> Org:
        org = await anyio.to_thread.run_sync(self._control.get_org, org_id)
        if org is None:
            raise NotFound("no such organization")
        return org

    async def create_org(self, name: str, plan: str, wire_profile: str, *, actor: str) -> Org:
        self.check_org_fields(name, plan, wire_profile)
        org = Org(new_org_id(), name, plan, wire_profile, self._now())
        audit = AuditEvent(
            org.org_id,
            org.created_at,
            actor,
            "org.created",
            org.org_id,
            {"name": name, "plan": plan, "wire_profile": wire_profile},
        )
        await anyio.to_thread.run_sync(self._control.create_org, org, audit)
        return org

    async def update_org(
        self,
        org_id: str,
        *,
        actor: str,
        name: str | None = None,
        plan: str | None = None,
        wire_profile: str | None = None,
        disabled: bool | None = None,
    ) -> Org:
        """Rename, change plan (effective on the next request), set wire profile, disable."""
        self.check_org_fields(name, plan, wire_profile)
        before = await self.existing_org(org_id)
        now = self._now()
        changes: dict[str, Any] = {
            field: value
            for field, value in (("name", name), ("plan", plan), ("wire_profile", wire_profile))
            if value is not None and value != getattr(before, field)
        }
        if disabled is not None and disabled != (before.disabled_at is not None):
            changes["disabled_at"] = now if disabled else None
        audit = [
            AuditEvent(org_id, now, actor, action, org_id, _change_details(before, changes))
            for action in org_change_actions(changes)
        ]
        updated = await anyio.to_thread.run_sync(self._control.update_org, org_id, changes, audit)
        if updated is None:
            raise NotFound("no such organization")
        self._service.credentials.invalidate()  # principals carry the org
        return updated

    # API keys -------------------------------------------------------------
    async def issue_key(
        self,
        org_id: str,
        *,
        name: str,
        role: str,
        surfaces: object,
        expires_at: datetime | None,
        actor: str,
    ) -> tuple[ApiKey, str]:
        """A new key and its secret (the only time the secret exists outside the caller)."""
        if role not in ROLES:
            raise InvalidRequest(f"role must be one of {', '.join(ROLES)}")
        if not name.strip() or len(name) > KEY_NAME_MAX:
            raise InvalidRequest(f"name must be 1 to {KEY_NAME_MAX} characters")
        try:
            patterns = validate_surface_patterns(surfaces)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from exc
        now = self._now()
        if expires_at is not None and expires_at <= now:
            raise InvalidRequest("expires_at must be in the future")
        await self.existing_org(org_id)
        secret = generate_secret()
        key = ApiKey(new_key_id(), org_id, name, role, patterns, now, expires_at, None)
        audit = AuditEvent(
            org_id,
            now,
            actor,
            "api_key.issued",
            key.key_id,
            {"name": name, "role": role, "surfaces": list(patterns)},
        )
        secret_hash = hash_secret(self._runtime.secret, secret)
        await anyio.to_thread.run_sync(self._control.insert_api_key, key, secret_hash, audit)
        return key, secret

    async def rotate_key(
        self, org_id: str, key_id: str, *, grace: timedelta, actor: str
    ) -> tuple[ApiKey, str]:
        """A new secret for the same key; the old one works for ``grace``, then 401."""
        if not timedelta(0) <= grace <= MAX_ROTATION_GRACE:
            raise InvalidRequest(
                f"grace_seconds must be between 0 and {int(MAX_ROTATION_GRACE.total_seconds())}"
            )
        now = self._now()
        secret = generate_secret()
        audit = AuditEvent(
            org_id,
            now,
            actor,
            "api_key.rotated",
            key_id,
            {"grace_seconds": int(grace.total_seconds())},
        )
        rotated = await anyio.to_thread.run_sync(
            lambda: self._control.rotate_api_key(
                org_id,
                key_id,
                hash_secret(self._runtime.secret, secret),
                now=now,
                previous_valid_until=now + grace,
                audit=audit,
            )
        )
        if rotated is None:
            raise NotFound("no such live key in this organization")
        self._service.credentials.invalidate()
        return rotated, secret

    async def revoke_key(self, org_id: str, key_id: str, *, actor: str) -> None:
        now = self._now()
        audit = AuditEvent(org_id, now, actor, "api_key.revoked", key_id)
        revoked = await anyio.to_thread.run_sync(
            self._control.revoke_api_key, org_id, key_id, now, audit
        )
        if not revoked:
            raise NotFound("no such key in this organization")
        self._service.credentials.invalidate()

    async def list_keys(self, org_id: str) -> list[ApiKey]:
        return await anyio.to_thread.run_sync(self._control.list_api_keys, org_id)

    # policies -------------------------------------------------------------
    async def publish_policy(
        self, org_id: str, policy_id: str, text: str, *, actor: str
    ) -> tuple[int, str]:
        """Validate and compile ``text``; store it as the next version. (version, hash)."""
        document = parse_policy_document(text, policy_id=policy_id, source_name=policy_id)
        compile_policy(document, PolicyRef(policy_id, 0, document.policy_hash))
        await self.existing_org(org_id)
        now = self._now()
        audit = AuditEvent(
            org_id,
            now,
            actor,
            "policy.published",
            policy_id,
            {"policy_hash": document.policy_hash},
        )
        version = await anyio.to_thread.run_sync(
            lambda: self._control.publish_policy(
                org_id, policy_id, document.data, text, document.policy_hash, now, audit
            )
        )
        self._service.policies.invalidate(org_id)
        return version, document.policy_hash


def _change_details(before: Org, changes: dict[str, Any]) -> dict[str, Any]:
    details: dict[str, Any] = {}
    for field, value in changes.items():
        old = getattr(before, field)
        details[field] = {
            "from": old.isoformat() if isinstance(old, datetime) else old,
            "to": value.isoformat() if isinstance(value, datetime) else value,
        }
    return details
