"""Repositories for the control plane: settings, organizations, API keys, policies."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from execauth.store.audit import append_audit
from execauth.store.tables import api_keys, orgs, policies, service_settings
from execauth.tenancy.api_keys import ApiKey, KeyMatch
from execauth.tenancy.audit import AuditEvent
from execauth.tenancy.orgs import Org


@dataclass(frozen=True, slots=True)
class StoredPolicy:
    org_id: str
    policy_id: str
    version: int
    document: dict[str, Any]
    source: str
    policy_hash: str
    created_at: datetime


class ControlStore:
    """Intention-revealing reads and writes for everything an operator configures."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # settings -------------------------------------------------------------
    def get_setting(self, name: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(
                select(service_settings.c.value).where(service_settings.c.name == name)
            ).scalar_one_or_none()

    def set_setting_if_absent(self, name: str, value: str) -> str:
        """Store ``value`` unless one exists; return whichever value is stored (race-safe)."""
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(service_settings).values(name=name, value=value))
        except IntegrityError:
            pass
        stored = self.get_setting(name)
        assert stored is not None
        return stored

    # organizations --------------------------------------------------------
    def create_org(self, org: Org, audit: AuditEvent) -> None:
        with self.engine.begin() as conn:
            append_audit(conn, audit)
            conn.execute(
                insert(orgs).values(
                    org_id=org.org_id,
                    name=org.name,
                    plan=org.plan,
                    wire_profile=org.wire_profile,
                    created_at=org.created_at,
                    disabled_at=org.disabled_at,
                )
            )

    def get_org(self, org_id: str) -> Org | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(orgs).where(orgs.c.org_id == org_id)).mappings().first()
        return Org(**row) if row is not None else None

    def update_org(
        self, org_id: str, changes: dict[str, Any], audit: list[AuditEvent]
    ) -> Org | None:
        """Apply ``changes`` (name, plan, wire_profile, disabled_at); ``None`` if no such org."""
        with self.engine.begin() as conn:
            if changes:
                updated = conn.execute(
                    update(orgs).where(orgs.c.org_id == org_id).values(**changes)
                )
                if updated.rowcount:
                    append_audit(conn, *audit)
            row = conn.execute(select(orgs).where(orgs.c.org_id == org_id)).mappings().first()
        return Org(**row) if row is not None else None

    def list_orgs(self) -> list[Org]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(orgs).order_by(orgs.c.created_at)).mappings().all()
        return [Org(**row) for row in rows]

    # API keys -------------------------------------------------------------
    def insert_api_key(self, key: ApiKey, secret_hash: str, audit: AuditEvent) -> None:
        with self.engine.begin() as conn:
            append_audit(conn, audit)
            conn.execute(
                insert(api_keys).values(
                    key_id=key.key_id,
                    org_id=key.org_id,
                    name=key.name,
                    role=key.role,
                    surfaces=key.surfaces_json(),
                    secret_hash=secret_hash,
                    created_at=key.created_at,
                    expires_at=key.expires_at,
                    revoked_at=key.revoked_at,
                )
            )

    def api_key_by_secret_hash(self, secret_hash: str) -> KeyMatch | None:
        """The key whose current or (rotated-out) previous secret has this hash."""
        query = select(api_keys).where(
            or_(
                api_keys.c.secret_hash == secret_hash,
                api_keys.c.previous_secret_hash == secret_hash,
            )
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        if row is None:
            return None
        return KeyMatch(_api_key(row), previous=row["secret_hash"] != secret_hash)

    def get_api_key(self, org_id: str, key_id: str) -> ApiKey | None:
        query = select(api_keys).where(api_keys.c.org_id == org_id, api_keys.c.key_id == key_id)
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return _api_key(row) if row is not None else None

    def rotate_api_key(
        self,
        org_id: str,
        key_id: str,
        new_secret_hash: str,
        *,
        now: datetime,
        previous_valid_until: datetime,
        audit: AuditEvent,
    ) -> ApiKey | None:
        """Make ``new_secret_hash`` current; the old secret works until ``previous_valid_until``.

        A secret rotated out earlier stops at once: only one previous secret is kept.
        ``None`` when the org has no such live (unrevoked) key.
        """
        with self.engine.begin() as conn:
            updated = conn.execute(
                update(api_keys)
                .where(
                    api_keys.c.org_id == org_id,
                    api_keys.c.key_id == key_id,
                    api_keys.c.revoked_at.is_(None),
                )
                .values(
                    previous_secret_hash=api_keys.c.secret_hash,
                    previous_valid_until=previous_valid_until,
                    secret_hash=new_secret_hash,
                    rotated_at=now,
                )
            )
            if not updated.rowcount:
                return None
            append_audit(conn, audit)
            row = conn.execute(select(api_keys).where(api_keys.c.key_id == key_id)).mappings().one()
        return _api_key(row)

    def touch_api_key(self, key_id: str, now: datetime) -> None:
        """Record use (callers throttle this to about once a minute per key)."""
        with self.engine.begin() as conn:
            conn.execute(
                update(api_keys).where(api_keys.c.key_id == key_id).values(last_used_at=now)
            )

    def list_api_keys(self, org_id: str) -> list[ApiKey]:
        with self.engine.connect() as conn:
            rows = (
                conn.execute(
                    select(api_keys)
                    .where(api_keys.c.org_id == org_id)
                    .order_by(api_keys.c.created_at)
                )
                .mappings()
                .all()
            )
        return [_api_key(row) for row in rows]

    def revoke_api_key(self, org_id: str, key_id: str, now: datetime, audit: AuditEvent) -> bool:
        """Revoke; ``False`` when the org has no such key. Revoking twice keeps the first time."""
        with self.engine.begin() as conn:
            found = conn.execute(
                select(api_keys.c.revoked_at).where(
                    api_keys.c.org_id == org_id, api_keys.c.key_id == key_id
                )
            ).first()
            if found is None:
                return False
            revoked = conn.execute(
                update(api_keys)
                .where(api_keys.c.key_id == key_id, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=now)
            )
            if revoked.rowcount:
                append_audit(conn, audit)
        return True

    # policies -------------------------------------------------------------
    def publish_policy(
        self,
        org_id: str,
        policy_id: str,
        document: dict[str, Any],
        source: str,
        policy_hash: str,
        now: datetime,
        audit: AuditEvent,
    ) -> int:
        """Store the next immutable version atomically; return its number.

        The primary key (org, policy, version) makes two racing publishers collide
        instead of sharing a version number; the loser retries with the next one.
        """
        for _ in range(5):
            try:
                with self.engine.begin() as conn:
                    latest = conn.execute(
                        select(func.max(policies.c.version)).where(
                            policies.c.org_id == org_id, policies.c.policy_id == policy_id
                        )
                    ).scalar_one_or_none()
                    version = (latest or 0) + 1
                    conn.execute(
                        insert(policies).values(
                            org_id=org_id,
                            policy_id=policy_id,
                            version=version,
                            document=json.dumps(document, ensure_ascii=False),
                            source=source,
                            policy_hash=policy_hash,
                            created_at=now,
                        )
                    )
                    details = {**audit.details, "version": version}
                    append_audit(conn, replace(audit, details=details))
                return version
            except IntegrityError:
                continue
        raise RuntimeError("could not allocate a policy version after 5 attempts")

    def latest_policies(self, org_id: str) -> list[StoredPolicy]:
        """The newest version of each of the org's policies: the active set."""
        latest = (
            select(policies.c.policy_id, func.max(policies.c.version).label("version"))
            .where(policies.c.org_id == org_id)
            .group_by(policies.c.policy_id)
            .subquery()
        )
        query = (
            select(policies)
            .join(
                latest,
                (policies.c.policy_id == latest.c.policy_id)
                & (policies.c.version == latest.c.version),
            )
            .where(policies.c.org_id == org_id)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [_policy(row) for row in rows]

    def get_policy(
        self, org_id: str, policy_id: str, version: int | None = None
    ) -> StoredPolicy | None:
        query = select(policies).where(
            policies.c.org_id == org_id, policies.c.policy_id == policy_id
        )
        if version is None:
            query = query.order_by(policies.c.version.desc()).limit(1)
        else:
            query = query.where(policies.c.version == version)
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return _policy(row) if row is not None else None


def _api_key(row: Any) -> ApiKey:
    return ApiKey(
        key_id=row["key_id"],
        org_id=row["org_id"],
        name=row["name"],
        role=row["role"],
        surfaces=tuple(json.loads(row["surfaces"])),
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        revoked_at=row["revoked_at"],
        last_used_at=row["last_used_at"],
        rotated_at=row["rotated_at"],
        previous_valid_until=row["previous_valid_until"],
    )


def _policy(row: Any) -> StoredPolicy:
    return StoredPolicy(
        org_id=row["org_id"],
        policy_id=row["policy_id"],
        version=row["version"],
        document=json.loads(row["document"]),
        source=row["source"],
        policy_hash=row["policy_hash"],
        created_at=row["created_at"],
    )
