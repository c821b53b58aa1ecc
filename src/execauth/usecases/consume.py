"""Using a PERMIT once: ``POST /v1/receipts/{receipt_id}/consume`` (docs/receipts.md).

``consume`` records, in one transaction, the consumption (the receipt id is the
primary key of ``receipt_consumptions``: the database lets exactly one consumer
commit, across instances), an audit event and an entry in the PERMIT's lineage.
Refused, before anything is written: a key that may not consume (an auditor), a
receipt this org does not hold or this key may not see (404, whether it exists
elsewhere or not); a receipt that is not a PERMIT, a PERMIT past its ``expires_at``
by the injected clock, a receipt used already (409 each, with its own code; the last
says when and by whom). Fail closed: only a committed claim returns a ``Consumption``.

The org's Merkle log holds receipts only (docs/ledger.md: each leaf is one signed
receipt); a consumption is recorded in the audit trail and the lineage, both
append-only (docs/decisions.md, "Receipts used once").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio.to_thread
from ulid import ULID

from execauth.errors import (
    Forbidden,
    NotFound,
    ReceiptAlreadyConsumed,
    ReceiptExpired,
    ReceiptNotPermit,
)
from execauth.store.audit import append_audit, append_lineage
from execauth.store.consumptions import (
    Consumption,
    ConsumptionStore,
    StoredReceipt,
    claim,
    find_receipt,
)
from execauth.tenancy.api_keys import ApiKey
from execauth.tenancy.audit import AuditEvent, key_actor
from execauth.usecases.execute import Clock
from execauth.wire_time import format_timestamp, parse_timestamp

CONSUMER_ROLES = ("execute", "admin")
LINEAGE_KIND = "receipt_consumed"
AUDIT_ACTION = "receipt.consumed"


@dataclass(frozen=True, slots=True)
class ConsumeRequest:
    """Who asks, for which receipt, and what they say about it."""

    key: ApiKey
    receipt_id: str
    actor: str | None = None
    note: str | None = None


def check_consumable(stored: StoredReceipt | None, key: ApiKey, now: datetime) -> StoredReceipt:
    """``stored`` if ``key`` may use it at ``now``; else the refusal, as an error."""
    if stored is None or not key.allows_surface(stored.surface):
        # A key limited to some surfaces learns nothing about the others' receipts.
        raise NotFound("no such receipt in this organization")
    if stored.decision != "PERMIT":
        raise ReceiptNotPermit(
            f"receipt {stored.receipt['receipt_id']} is a {stored.decision}; "
            "only a PERMIT can be used"
        )
    expires_at = _expiry(stored.receipt)
    if expires_at is None or now >= expires_at:
        raise ReceiptExpired(
            f"the PERMIT expired at {stored.receipt.get('expires_at')}; it cannot be used"
        )
    return stored


def _expiry(receipt: Mapping[str, Any]) -> datetime | None:
    raw = receipt.get("expires_at")
    if not isinstance(raw, str):
        return None  # a PERMIT without an expiry is not one we issued: refused
    try:
        return parse_timestamp(raw)
    except ValueError:
        return None


def consume(store: ConsumptionStore, request: ConsumeRequest, now: datetime) -> Consumption:
    """Mark the receipt used by ``request.key``'s org at ``now``, exactly once."""
    key = request.key
    if key.role not in CONSUMER_ROLES:
        raise Forbidden(f"a key with role {key.role!r} cannot consume receipts")
    with store.transaction() as conn:
        stored = check_consumable(find_receipt(conn, key.org_id, request.receipt_id), key, now)
        consumption = Consumption(
            receipt_id=request.receipt_id,
            org_id=key.org_id,
            execution_id=stored.execution_id,
            consumed_at=now,
            key_id=key.key_id,
            actor=request.actor,
            note=request.note,
        )
        earlier = claim(conn, consumption)
        if earlier is not None:
            raise _already(earlier)
        details = consumption.as_json()
        append_audit(
            conn,
            AuditEvent(key.org_id, now, key_actor(key.key_id), AUDIT_ACTION,
                       request.receipt_id, details),
        )  # fmt: skip
        append_lineage(
            conn,
            event_id="lin_" + str(ULID()).lower(),
            execution_id=stored.execution_id,
            org_id=key.org_id,
            occurred_at=now,
            kind=LINEAGE_KIND,
            details=details,
        )
    return consumption


class ReceiptConsumption:
    """The use case the consume route calls: ``consume`` in a worker thread at the clock's now."""

    def __init__(self, store: ConsumptionStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def consume(self, request: ConsumeRequest) -> Consumption:
        return await anyio.to_thread.run_sync(consume, self._store, request, self._clock())


def _already(earlier: Consumption) -> ReceiptAlreadyConsumed:
    who = f"key {earlier.key_id}" + (f" ({earlier.actor})" if earlier.actor else "")
    return ReceiptAlreadyConsumed(
        f"receipt {earlier.receipt_id} was already used at "
        f"{format_timestamp(earlier.consumed_at)} by {who}",
        details=[earlier.as_json()],
    )
