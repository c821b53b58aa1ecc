"""Audit bundles: everything needed to check an organization's receipts offline.

A bundle holds the receipts of a time range with their inclusion proofs, every
leaf hash of the log up to the bundle's checkpoint (so that a verifier can check
the log is gap-free and consistent with any checkpoint it trusted before), the
checkpoint itself and the key list. ``ledger.bundle`` verifies it with no network.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
from sqlalchemy import select

from execauth.keyring import key_list_document
from execauth.ledger.bundle import BUNDLE_FORMAT
from execauth.runtime import Runtime
from execauth.sequencer import log_origin
from execauth.store.tables import executions
from execauth.wire_time import format_timestamp


def build_bundle(
    runtime: Runtime, org_id: str, since: datetime | None, until: datetime | None, now: datetime
) -> dict[str, Any]:
    """The bundle for ``org_id``'s receipts decided in [since, until), as of the latest checkpoint.

    The range is widened to whole log-index spans: a receipt sequenced between two
    selected ones is included even if it falls just outside the times, so that the
    receipts' indexes are contiguous and a deletion shows as a gap.
    """
    logs = runtime.logs
    checkpoint = logs.latest_checkpoint(org_id)
    size = checkpoint.tree_size if checkpoint is not None else 0
    query = select(executions.c.log_index, executions.c.receipt).where(
        executions.c.org_id == org_id
    )
    if since is not None:
        query = query.where(executions.c.decided_at_ms >= int(since.timestamp() * 1000))
    if until is not None:
        query = query.where(executions.c.decided_at_ms < int(until.timestamp() * 1000))
    with runtime.engine.connect() as conn:
        selected = conn.execute(query).all()
        indexes = [row[0] for row in selected if row[0] is not None and row[0] < size]
        pending = len(selected) - len(indexes)
        rows: list[Any] = []
        if indexes:
            rows = list(
                conn.execute(
                    select(executions.c.log_index, executions.c.receipt)
                    .where(
                        executions.c.org_id == org_id,
                        executions.c.log_index >= min(indexes),
                        executions.c.log_index <= max(indexes),
                    )
                    .order_by(executions.c.log_index)
                ).all()
            )
    return {
        "format": BUNDLE_FORMAT,
        "org_id": org_id,
        "origin": log_origin(runtime.settings.issuer, org_id),
        "exported_at": format_timestamp(now),
        "since": format_timestamp(since) if since else None,
        "until": format_timestamp(until) if until else None,
        "key_list": key_list_document(runtime.keyring.records, runtime.settings.issuer),
        "checkpoint": checkpoint.note if checkpoint is not None else None,
        "tree_size": size,
        "leaf_hashes": [h.hex() for h in logs.leaf_hashes(org_id, size)],
        "receipts": [
            {
                "log_index": index,
                "receipt": msgspec.json.decode(bytes(receipt)),
                "inclusion_path": [h.hex() for h in logs.inclusion_path(org_id, index, size)],
            }
            for index, receipt in rows
        ],
        "pending": pending,
    }
