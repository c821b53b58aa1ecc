"""Audit bundles: everything needed to check an organization's receipts offline.

A bundle holds the receipts of a time range with their inclusion proofs, every
leaf hash of the log up to the bundle's checkpoint (so that a verifier can check
the log is gap-free and consistent with any checkpoint it trusted before), the
checkpoint itself and the key list. ``ledger.bundle`` verifies it with no network.

A bundle can hold millions of receipts, so it is never built in memory: ``bundle_scope``
settles what it holds (a few aggregate queries), then ``bundle_chunks`` writes its JSON
a chunk of the log at a time, each chunk read and proved with queries of its own. The
stored receipt bytes go into the JSON as they are (they are the JSON the service sent).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

import msgspec

from execauth.keyring import key_list_document
from execauth.ledger.bundle import BUNDLE_FORMAT
from execauth.ledger.merkle import inclusion_proof
from execauth.serving.runtime import Runtime
from execauth.serving.sequencer import log_origin
from execauth.store.ledger import StoredCheckpoint
from execauth.wire_time import format_timestamp

# Receipts (and their proofs) per chunk, and leaf hashes per chunk: each chunk is one
# transaction's worth of reads, and what the process holds of a bundle at any time.
RECEIPTS_PER_CHUNK = 1_000
LEAVES_PER_CHUNK = 20_000


@dataclass(frozen=True, slots=True)
class BundleScope:
    """What a bundle holds, settled before its first byte is written.

    Everything it names is immutable once sequenced (leaves, nodes, the receipts'
    log indexes), so the chunks read later agree with it whatever the sequencer does
    meanwhile.
    """

    org_id: str
    since: datetime | None
    until: datetime | None
    exported_at: datetime
    checkpoint: StoredCheckpoint | None
    first_index: int  # the receipts are the log's [first_index, end_index)
    end_index: int
    pending: int  # selected but not yet under the checkpoint

    @property
    def tree_size(self) -> int:
        return self.checkpoint.tree_size if self.checkpoint is not None else 0

    @property
    def receipts(self) -> int:
        return self.end_index - self.first_index

    def headers(self) -> dict[str, str]:
        """What the client can tell before the body: its progress and its summary."""
        return {
            "X-Bundle-Receipts": str(self.receipts),
            "X-Bundle-Tree-Size": str(self.tree_size),
            "X-Bundle-Pending": str(self.pending),
        }


class BundleExport:
    """The export use case: a bundle's scope as of the clock's now, then its chunks.

    ``scope`` and ``chunks`` block (database reads): call them from a worker thread.
    """

    def __init__(self, runtime: Runtime, clock: Callable[[], datetime]) -> None:
        self._runtime = runtime
        self._clock = clock

    def scope(self, org_id: str, since: datetime | None, until: datetime | None) -> BundleScope:
        return bundle_scope(self._runtime, org_id, since, until, self._clock())

    def chunks(self, scope: BundleScope) -> Iterator[bytes]:
        return bundle_chunks(self._runtime, scope)


def bundle_scope(
    runtime: Runtime, org_id: str, since: datetime | None, until: datetime | None, now: datetime
) -> BundleScope:
    """The bundle of ``org_id``'s receipts decided in [since, until), as of the latest checkpoint.

    The range is widened to whole log-index spans: a receipt sequenced between two
    selected ones is included even if it falls just outside the times, so that the
    receipts' indexes are contiguous and a deletion shows as a gap.
    """
    checkpoint = runtime.logs.latest_checkpoint(org_id)
    size = checkpoint.tree_size if checkpoint is not None else 0
    span = runtime.logs.decided_span(org_id, since, until, size)
    return BundleScope(org_id, since, until, now, checkpoint, span.first, span.end, span.pending)


def bundle_chunks(runtime: Runtime, scope: BundleScope) -> Iterator[bytes]:
    """The bundle's JSON, in pieces of at most one chunk of the log each."""
    issuer = runtime.settings.issuer
    head = {
        "format": BUNDLE_FORMAT,
        "org_id": scope.org_id,
        "origin": log_origin(issuer, scope.org_id),
        "exported_at": format_timestamp(scope.exported_at),
        "since": format_timestamp(scope.since) if scope.since else None,
        "until": format_timestamp(scope.until) if scope.until else None,
        "key_list": key_list_document(runtime.keyring.records, issuer),
        "checkpoint": scope.checkpoint.note if scope.checkpoint is not None else None,
        "tree_size": scope.tree_size,
        "pending": scope.pending,
    }
    # The same object ``json.loads`` gives back as before: the fixed fields, then the lists.
    yield msgspec.json.encode(head)[:-1] + b',"leaf_hashes":['
    for start in range(0, scope.tree_size, LEAVES_PER_CHUNK):
        end = min(start + LEAVES_PER_CHUNK, scope.tree_size)
        hashes = _leaf_hashes(runtime, scope.org_id, start, end)
        yield (b"," if start else b"") + b",".join(b'"%s"' % h.hex().encode() for h in hashes)
    yield b'],"receipts":['
    for start in range(scope.first_index, scope.end_index, RECEIPTS_PER_CHUNK):
        end = min(start + RECEIPTS_PER_CHUNK, scope.end_index)
        entries = _receipt_entries(runtime, scope, start, end)
        yield (b"," if start > scope.first_index else b"") + b",".join(entries)
    yield b"]}\n"


def _leaf_hashes(runtime: Runtime, org_id: str, start: int, end: int) -> list[bytes]:
    hashes = runtime.logs.leaf_hashes(org_id, end, start=start)
    if len(hashes) != end - start:
        # The checkpoint commits to these leaves: a hole is corruption, never a shorter log.
        raise LookupError(f"log {org_id}: leaves [{start}, {end}) are incomplete")
    return hashes


def _receipt_entries(runtime: Runtime, scope: BundleScope, start: int, end: int) -> list[bytes]:
    """``{"log_index", "receipt", "inclusion_path"}`` of the log's [start, end), as JSON."""
    rows = runtime.logs.sequenced_receipts(scope.org_id, start, end)
    paths = _inclusion_paths(runtime, scope, [index for index, _ in rows])
    return [
        b'{"log_index":%d,"receipt":%s,"inclusion_path":%s}'
        % (index, receipt, msgspec.json.encode([h.hex() for h in path]))
        for (index, receipt), path in zip(rows, paths, strict=True)
    ]


def _inclusion_paths(runtime: Runtime, scope: BundleScope, indexes: list[int]) -> list[list[bytes]]:
    """Each index's RFC 9162 inclusion proof, with one prefetch of every node they share.

    Proof generation asks for the same subtrees whatever their hashes, so a hash-free
    first pass names the nodes; one fetch loads them; the second pass builds the proofs.
    """
    asked: list[tuple[int, int]] = []

    def record(start: int, end: int) -> bytes:
        asked.append((start, end))
        return bytes(32)

    for index in indexes:
        inclusion_proof(index, scope.tree_size, record)
    roots = runtime.logs.subtree_roots(scope.org_id)
    roots.prefetch(asked)
    return [inclusion_proof(index, scope.tree_size, roots) for index in indexes]
