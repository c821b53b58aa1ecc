"""Repository for the service's signing keys (sealed private halves, see ``keyring``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, insert, select, update

from execauth.keyring import DueRotation, SigningKeyRecord
from execauth.store.audit import append_audit
from execauth.store.tables import signing_keys
from execauth.tenancy.audit import AuditEvent
from execauth.wire_time import truncate_to_millis


class SigningKeyStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def all_keys(self) -> list[SigningKeyRecord]:
        """Every key ever created, oldest first: all stay published so old receipts verify."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(signing_keys).order_by(signing_keys.c.created_at)).mappings()
            return [_record(row) for row in rows]

    def insert_key(self, record: SigningKeyRecord, *audit: AuditEvent) -> None:
        with self.engine.begin() as conn:
            conn.execute(insert(signing_keys).values(**_values(record)))
            append_audit(conn, *audit)

    def rotate(
        self, new_key: SigningKeyRecord, retire_at: datetime, actor: str, *, now: datetime
    ) -> list[str]:
        """Add ``new_key`` and schedule every active key's retirement, in one transaction.

        ``new_key.created_at`` may lie ahead of ``now``: the key is published before it signs.
        """
        retire_at = truncate_to_millis(retire_at)
        with self.engine.begin() as conn:
            active = (
                conn.execute(
                    select(signing_keys.c.key_id).where(
                        signing_keys.c.retired_at.is_(None), signing_keys.c.revoked_at.is_(None)
                    )
                )
                .scalars()
                .all()
            )
            conn.execute(
                update(signing_keys)
                .where(signing_keys.c.key_id.in_(active))
                .values(retired_at=retire_at)
            )
            conn.execute(insert(signing_keys).values(**_values(new_key)))
            append_audit(
                conn,
                AuditEvent(
                    None,
                    now,
                    actor,
                    "signing_key.rotated",
                    new_key.key_id,
                    {
                        "retiring": list(active),
                        "retire_at": retire_at.isoformat(),
                        "signs_from": new_key.created_at.isoformat(),
                    },
                ),
            )
        return list(active)

    def rotate_on_schedule(
        self, due: DueRotation, successor: SigningKeyRecord, now: datetime, actor: str
    ) -> bool:
        """Publish ``successor`` and end the current key at ``due.hands_over_at``; at most once.

        Every instance's refresh loop may find the same rotation due at the same moment.
        The database decides: only the transaction whose conditional UPDATE still finds
        the current key without an end inserts a successor (on PostgreSQL the second
        waits for the first's row lock and then matches nothing; on SQLite writers are
        serialized). ``False``: another process rotated first, or the key was ended or
        revoked meanwhile; nothing was written.
        """
        hands_over_at = truncate_to_millis(due.hands_over_at)
        with self.engine.begin() as conn:
            won = conn.execute(
                update(signing_keys)
                .where(
                    signing_keys.c.key_id == due.current_key_id,
                    signing_keys.c.retired_at.is_(None),
                    signing_keys.c.revoked_at.is_(None),
                )
                .values(retired_at=hands_over_at)
            ).rowcount
            if won != 1:
                return False
            # Any other key without an end (a replacement left by a revocation) ends too,
            # so that after the handover exactly one key has no end: the successor.
            others = (
                conn.execute(
                    update(signing_keys)
                    .where(
                        signing_keys.c.key_id != due.current_key_id,
                        signing_keys.c.retired_at.is_(None),
                        signing_keys.c.revoked_at.is_(None),
                    )
                    .values(retired_at=hands_over_at)
                    .returning(signing_keys.c.key_id)
                )
                .scalars()
                .all()
            )
            conn.execute(insert(signing_keys).values(**_values(successor)))
            append_audit(
                conn,
                AuditEvent(
                    None,
                    now,
                    actor,
                    "signing_key.rotated",
                    successor.key_id,
                    {
                        "scheduled": True,
                        "retiring": [due.current_key_id, *others],
                        "retire_at": hands_over_at.isoformat(),
                        "signs_from": successor.created_at.isoformat(),
                    },
                ),
            )
        return True

    def revoke(self, key_id: str, now: datetime, actor: str) -> bool:
        """Mark ``key_id`` revoked (receipts it signed no longer verify); ``False`` if unknown."""
        with self.engine.begin() as conn:
            result = conn.execute(
                update(signing_keys)
                .where(signing_keys.c.key_id == key_id, signing_keys.c.revoked_at.is_(None))
                .values(revoked_at=now)
            )
            if result.rowcount:
                append_audit(conn, AuditEvent(None, now, actor, "signing_key.revoked", key_id))
            if result.rowcount == 0:
                return (
                    conn.execute(
                        select(signing_keys.c.key_id).where(signing_keys.c.key_id == key_id)
                    ).first()
                    is not None
                )
        return True


def _values(record: SigningKeyRecord) -> dict[str, Any]:
    return {
        "key_id": record.key_id,
        "public_key": record.public_key,
        "sealed_private_key": record.sealed_private_key,
        "created_at": record.created_at,
        "retired_at": record.retired_at,
        "revoked_at": record.revoked_at,
    }


def _record(row: Any) -> SigningKeyRecord:
    return SigningKeyRecord(
        key_id=row["key_id"],
        public_key=bytes(row["public_key"]),
        sealed_private_key=bytes(row["sealed_private_key"]),
        created_at=row["created_at"],
        retired_at=row["retired_at"],
        revoked_at=row["revoked_at"],
    )
