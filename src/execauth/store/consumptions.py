"""Receipts used once, stored (migration 0009, docs/receipts.md "Using a PERMIT once").

``receipt_consumptions`` holds at most one row per receipt: its primary key is the
receipt id, so the database, not a read-then-write in the code, decides which of two
concurrent consumers wins. The claim is ``INSERT … ON CONFLICT DO NOTHING``: on
PostgreSQL a second instance's insert waits for the first transaction and then finds
the row; on SQLite the writer lock and ``BEGIN IMMEDIATE`` serialize the transactions.
The table is append-only (database triggers): a used receipt never becomes usable again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
from sqlalchemy import Column, Connection, Engine, Index, String, Table, Text, select
from sqlalchemy.dialects import postgresql, sqlite

from execauth.errors import InternalError
from execauth.store.database import WriterLock, begin_writing
from execauth.store.tables import UTCDateTime, executions, metadata
from execauth.wire_time import format_timestamp

receipt_consumptions = Table(
    "receipt_consumptions",
    metadata,
    Column("receipt_id", String(64), primary_key=True),  # exactly one consumption each
    Column("org_id", String(64), nullable=False),
    Column("execution_id", String(64), nullable=False),  # the PERMIT's execution
    Column("consumed_at", UTCDateTime, nullable=False),
    Column("key_id", String(64), nullable=False),  # the API key that consumed it
    Column("actor", String(256), nullable=True),  # who, as that key's caller named them
    Column("note", Text, nullable=True),
    Index("ix_receipt_consumptions_org_time", "org_id", "consumed_at"),
)


@dataclass(frozen=True, slots=True)
class StoredReceipt:
    execution_id: str
    decision: str
    surface: str
    receipt: dict[str, Any]  # the signed receipt as it was answered


@dataclass(frozen=True, slots=True)
class Consumption:
    receipt_id: str
    org_id: str
    execution_id: str
    consumed_at: datetime
    key_id: str
    actor: str | None
    note: str | None

    def as_json(self) -> dict[str, Any]:
        """The wire form (the 200 body, and the details of a 409)."""
        by: dict[str, Any] = {"key_id": self.key_id}
        if self.actor is not None:
            by["actor"] = self.actor
        body: dict[str, Any] = {
            "receipt_id": self.receipt_id,
            "execution_id": self.execution_id,
            "consumed_at": format_timestamp(self.consumed_at),
            "consumed_by": by,
        }
        if self.note is not None:
            body["note"] = self.note
        return body


class ConsumptionStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = WriterLock.for_engine(engine)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One write transaction: the claim, the audit event and the lineage commit together."""
        with self._lock.held(), self.engine.connect() as conn, conn.begin():
            begin_writing(conn)
            yield conn

    def consumption(self, org_id: str, receipt_id: str) -> Consumption | None:
        with self.engine.connect() as conn:
            return find_consumption(conn, org_id, receipt_id)


def find_receipt(conn: Connection, org_id: str, receipt_id: str) -> StoredReceipt | None:
    """The org's receipt with this id; another org's is ``None`` too (no existence leak)."""
    row = (
        conn.execute(
            select(
                executions.c.execution_id,
                executions.c.decision,
                executions.c.surface,
                executions.c.receipt,
            ).where(executions.c.org_id == org_id, executions.c.receipt_id == receipt_id)
        )
        .mappings()
        .first()
    )
    if row is None:
        return None
    return StoredReceipt(
        execution_id=row["execution_id"],
        decision=row["decision"],
        surface=row["surface"],
        receipt=msgspec.json.decode(bytes(row["receipt"])),
    )


def claim(conn: Connection, consumption: Consumption) -> Consumption | None:
    """Record ``consumption``; ``None`` if it was recorded, else the one that came first."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    inserted = conn.execute(
        dialect.insert(receipt_consumptions)
        .values(
            receipt_id=consumption.receipt_id,
            org_id=consumption.org_id,
            execution_id=consumption.execution_id,
            consumed_at=consumption.consumed_at,
            key_id=consumption.key_id,
            actor=consumption.actor,
            note=consumption.note,
        )
        .on_conflict_do_nothing(index_elements=["receipt_id"])
        # RETURNING, not rowcount: drivers do not all report one for an upsert.
        .returning(receipt_consumptions.c.receipt_id)
    ).first()
    if inserted is not None:
        return None
    # Read committed: the winner's transaction has committed (PostgreSQL made this
    # insert wait for it), so this statement sees its row.
    earlier = find_consumption(conn, consumption.org_id, consumption.receipt_id)
    if earlier is None:
        raise InternalError(f"receipt {consumption.receipt_id} conflicts with no consumption")
    return earlier


def find_consumption(conn: Connection, org_id: str, receipt_id: str) -> Consumption | None:
    row = (
        conn.execute(
            select(receipt_consumptions).where(
                receipt_consumptions.c.org_id == org_id,
                receipt_consumptions.c.receipt_id == receipt_id,
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        return None
    return Consumption(
        receipt_id=row["receipt_id"],
        org_id=row["org_id"],
        execution_id=row["execution_id"],
        consumed_at=row["consumed_at"],
        key_id=row["key_id"],
        actor=row["actor"],
        note=row["note"],
    )
