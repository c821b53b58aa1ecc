"""Offline verification of an audit bundle (``execauth export`` → ``execauth audit verify``).

Checks, with no network: the checkpoint's signature by a published key; that the
bundle's leaf hashes are the whole log the checkpoint commits to; every receipt's
signature, its leaf and its inclusion proof; that the receipts' log indexes are
contiguous (a deleted receipt would leave a gap); and, given a checkpoint the
auditor trusted earlier, that today's log extends it (nothing was rewritten).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from execauth.ledger.checkpoint import Checkpoint, verify_checkpoint
from execauth.ledger.merkle import ProofError, leaf_hash, merkle_root, verify_inclusion
from execauth.ledger.note import NoteError
from execauth.receipts import signing_payload
from execauth.verify import KeyListError, parse_key_list, verify_receipt

BUNDLE_FORMAT = "execauth-audit-bundle/1"


@dataclass
class BundleReport:
    receipts_checked: int = 0
    expired_permits: int = 0
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


class BundleError(ValueError):
    """The file is not an audit bundle at all (a usage error, not a failed audit)."""


def verify_bundle(
    bundle: Mapping[str, Any],
    *,
    now: datetime,
    keys_document: Mapping[str, Any] | None = None,
    trusted_checkpoint: str | None = None,
) -> BundleReport:
    """Audit ``bundle``; ``keys_document`` replaces its key list when the auditor has one."""
    if bundle.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"not an audit bundle (format is not {BUNDLE_FORMAT!r})")
    report = BundleReport()
    try:
        keys, issuer = parse_key_list(keys_document or bundle["key_list"])
        origin = str(bundle["origin"])
        org_id = str(bundle["org_id"])
        leaves = [bytes.fromhex(h) for h in bundle["leaf_hashes"]]
        entries = list(bundle["receipts"])
    except (KeyError, TypeError, ValueError, KeyListError) as exc:
        raise BundleError(f"malformed bundle: {exc}") from exc
    if not origin.endswith(f"/log/{org_id}"):
        report.failures.append(f"origin {origin!r} is not the log of {org_id}")
        return report
    public_keys = [
        key.public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
        for key in keys.values()
        if key.status != "revoked"
    ]

    checkpoint = _checkpoint(bundle.get("checkpoint"), origin, public_keys, report, "bundle")
    if checkpoint is None:
        return report
    if checkpoint.tree_size != len(leaves):
        report.failures.append(
            f"the bundle has {len(leaves)} leaf hashes; its checkpoint commits to "
            f"{checkpoint.tree_size}"
        )
        return report
    if merkle_root(leaves) != checkpoint.root_hash:
        report.failures.append("the leaf hashes do not hash to the checkpoint's root")
        return report
    report.notes.append(f"checkpoint of {origin} at size {checkpoint.tree_size}: signature valid")

    _check_receipts(entries, leaves, checkpoint, keys, issuer, org_id, now, report)

    if trusted_checkpoint is not None:
        trusted = _checkpoint(trusted_checkpoint, origin, public_keys, report, "trusted")
        if trusted is not None:
            if trusted.tree_size > checkpoint.tree_size:
                # A log never shrinks: either this export predates the trusted checkpoint,
                # or the log was rolled back (a database restored from an older backup).
                report.failures.append(
                    f"ROLLED BACK: the bundle's log has {checkpoint.tree_size} entries, the "
                    f"trusted checkpoint {trusted.tree_size}; unless this bundle was exported "
                    "before that checkpoint, the log lost entries (e.g. a restored backup)"
                )
            elif merkle_root(leaves[: trusted.tree_size]) != trusted.root_hash:
                report.failures.append(
                    f"INCONSISTENT: the log's first {trusted.tree_size} entries no longer hash "
                    "to the trusted checkpoint's root; history was rewritten"
                )
            else:
                report.notes.append(
                    f"consistent with the trusted checkpoint at size {trusted.tree_size}"
                )
    return report


def _checkpoint(
    note: object, origin: str, public_keys: list[bytes], report: BundleReport, which: str
) -> Checkpoint | None:
    if not isinstance(note, str):
        report.failures.append(f"the {which} checkpoint is missing")
        return None
    try:
        return verify_checkpoint(note, origin=origin, public_keys=public_keys)
    except NoteError as exc:
        report.failures.append(f"the {which} checkpoint does not verify: {exc}")
        return None


def _check_receipts(
    entries: list[Any],
    leaves: list[bytes],
    checkpoint: Checkpoint,
    keys: Mapping[str, Any],
    issuer: str | None,
    org_id: str,
    now: datetime,
    report: BundleReport,
) -> None:
    indexes = []
    for entry in entries:
        try:
            index = int(entry["log_index"])
            receipt = entry["receipt"]
            path = [bytes.fromhex(h) for h in entry["inclusion_path"]]
        except (KeyError, TypeError, ValueError):
            report.failures.append(f"malformed receipt entry: {str(entry)[:80]}")
            continue
        indexes.append(index)
        report.receipts_checked += 1
        rid = receipt.get("receipt_id") if isinstance(receipt, dict) else None
        verdict = verify_receipt(receipt, keys, now=now, issuer=issuer)
        if not verdict.authentic:
            report.failures.append(f"receipt {rid} (index {index}): {verdict.reason}")
            continue
        if verdict.expired:
            report.expired_permits += 1  # expiry limits use, not authenticity
        if receipt.get("org_id") != org_id:
            report.failures.append(f"receipt {rid} belongs to another organization")
            continue
        if not 0 <= index < len(leaves):
            report.failures.append(f"receipt {rid}: index {index} is outside the log")
            continue
        leaf = leaf_hash(signing_payload(receipt))
        if leaf != leaves[index]:
            report.failures.append(f"receipt {rid}: not the receipt at log index {index}")
            continue
        try:
            verify_inclusion(index, checkpoint.tree_size, leaf, path, checkpoint.root_hash)
        except ProofError as exc:
            report.failures.append(f"receipt {rid}: inclusion proof fails: {exc}")
    if indexes:
        expected = list(range(min(indexes), max(indexes) + 1))
        if sorted(indexes) != expected:
            missing = sorted(set(expected) - set(indexes))
            report.failures.append(
                f"log indexes are not contiguous: missing {missing[:10]}"
                + (" …" if len(missing) > 10 else "")
                + (" (duplicates present)" if len(indexes) != len(set(indexes)) else "")
            )
