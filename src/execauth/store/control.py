"""Repositories for the control plane: settings, organizations, API keys, policies."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from execauth.store.tables import api_keys, orgs, policies, service_settings
from execauth.tenancy.api_keys import ApiKey
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
    def create_org(self, org: Org) -> None:
        with self.engine.begin() as conn:
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

    def list_orgs(self) -> list[Org]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(orgs).order_by(orgs.c.created_at)).mappings().all()
        return [Org(**row) for row in rows]

    # API keys -------------------------------------------------------------
    def insert_api_key(self, key: ApiKey, secret_hash: str) -> None:
        with self.engine.begin() as conn:
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

    def api_key_by_secret_hash(self, secret_hash: str) -> ApiKey | None:
        with self.engine.connect() as conn:
            row = (
                conn.execute(select(api_keys).where(api_keys.c.secret_hash == secret_hash))
                .mappings()
                .first()
            )
        return _api_key(row) if row is not None else None

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

    def revoke_api_key(self, org_id: str, key_id: str, now: datetime) -> bool:
        """Revoke; ``False`` when the org has no such key. Revoking twice keeps the first time."""
        with self.engine.begin() as conn:
            found = conn.execute(
                select(api_keys.c.revoked_at).where(
                    api_keys.c.org_id == org_id, api_keys.c.key_id == key_id
                )
            ).first()
            if found is None:
                return False
            conn.execute(
                update(api_keys)
                .where(api_keys.c.key_id == key_id, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=now)
            )
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
