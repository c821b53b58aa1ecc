"""The shared vectors of approvals: both Python verifiers show who approved, from signed data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from execauth_client.verify import verify as sdk_verify

from execauth.verify import parse_key_list, verify_receipt
from execauth.wire_time import parse_timestamp

VECTORS = Path(__file__).resolve().parents[2] / "testdata" / "vectors"
NOW = parse_timestamp("2026-01-01T00:00:00.000Z")
APPROVERS = ("key_01j00000000000000000000001", "key_01j00000000000000000000002")


def _case(name: str) -> dict[str, Any]:
    case: dict[str, Any] = json.loads((VECTORS / "cases" / f"{name}.json").read_text())
    return case


def _keys() -> dict[str, Any]:
    keys: dict[str, Any] = json.loads((VECTORS / "keylists" / "standard.json").read_text())
    return keys


def test_the_server_verifier_names_the_approvers_of_a_linked_permit() -> None:
    keys, issuer = parse_key_list(_keys())
    verdict = verify_receipt(_case("permit-after-approval-valid")["receipt"], keys, now=NOW,
                             issuer=issuer)  # fmt: skip
    assert verdict.approvers == APPROVERS
    assert "approved by" in verdict.detail


def test_the_sdk_verifier_names_the_approvers_of_a_linked_permit() -> None:
    verdict = sdk_verify(_case("permit-after-approval-valid")["receipt"], _keys(), now=NOW)
    assert verdict.approvers == APPROVERS


def test_an_escalate_is_authentic_but_never_a_permit() -> None:
    keys, issuer = parse_key_list(_keys())
    receipt = _case("escalate-valid")["receipt"]
    verdict = verify_receipt(receipt, keys, now=NOW, issuer=issuer)
    assert verdict.authentic
    assert verdict.decision == "ESCALATE"
    assert receipt["enforcement"] == "BLOCKED"
