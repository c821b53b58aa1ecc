"""The stateless shape check (POST /protocol/verify-receipt) knows ESCALATE."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from execauth.receipt_shape import check_receipt_shape

CASES = Path(__file__).resolve().parents[2] / "testdata" / "vectors" / "cases"


def _escalate() -> dict[str, Any]:
    receipt: dict[str, Any] = json.loads((CASES / "escalate-valid.json").read_text())["receipt"]
    return receipt


def test_an_escalate_receipt_is_a_complete_receipt() -> None:
    assert check_receipt_shape(_escalate(), strict=True).errors == ()


def test_an_escalate_that_claims_execution_is_refused() -> None:
    verdict = check_receipt_shape(_escalate() | {"enforcement": "EXECUTED"})
    assert "enforcement of a ESCALATE must be BLOCKED" in verdict.errors


def test_an_escalate_with_an_expiry_is_refused() -> None:
    verdict = check_receipt_shape(_escalate() | {"expires_at": "2099-01-01T00:00:00Z"})
    assert not verdict.valid


def test_an_escalate_without_an_approval_id_is_refused() -> None:
    receipt = {k: v for k, v in _escalate().items() if k != "approval_id"}
    assert not check_receipt_shape(receipt).valid
