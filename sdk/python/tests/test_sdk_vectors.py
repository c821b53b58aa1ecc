"""The SDK's own verifier reaches the expected verdict on every shared vector."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from conftest import VECTORS_DIR, read_json
from execauth_client import KeyList, Receipt, UnexpectedResponse, verify
from execauth_client.verify import parse_timestamp

CASES: list[dict[str, Any]] = [
    read_json(VECTORS_DIR / entry["file"])
    for entry in read_json(VECTORS_DIR / "index.json")["vectors"]
]


def _keys(case: dict[str, Any]) -> Any:
    return read_json(Path(VECTORS_DIR / case["keys"]))


def _got(case: dict[str, Any], now: datetime) -> dict[str, Any]:
    verdict = verify(case["receipt"], KeyList.from_document(_keys(case)), now=now)
    return {
        "authentic": verdict.authentic,
        "reason": verdict.reason,
        "expired": verdict.expired,
        "decision": verdict.decision,
        "key_id": verdict.key_id,
        "exit_code": 0 if verdict.usable else 1,
    }


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_sdk_verifier_agrees_with_the_vector(case: dict[str, Any]) -> None:
    assert _got(case, parse_timestamp(case["now"])) == case["expected"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_vector_verdicts_hold_at_the_real_clock(case: dict[str, Any]) -> None:
    assert _got(case, datetime.now(UTC)) == case["expected"]


RECEIPT_OBJECTS = [
    c
    for c in CASES
    if isinstance(c["receipt"], dict)
    and isinstance(c["receipt"].get("receipt_id"), str)
    and isinstance(c["receipt"].get("decision"), str)
]


@pytest.mark.parametrize("case", RECEIPT_OBJECTS, ids=[c["name"] for c in RECEIPT_OBJECTS])
def test_receipt_object_verifies_like_its_raw_json(case: dict[str, Any]) -> None:
    receipt = Receipt.from_dict(case["receipt"])
    verdict = receipt.verify(_keys(case), now=parse_timestamp(case["now"]))
    assert (verdict.authentic, verdict.reason) == (
        case["expected"]["authentic"],
        case["expected"]["reason"],
    )


def test_non_objects_are_not_receipts() -> None:
    with pytest.raises(UnexpectedResponse):
        Receipt.from_dict(["not", "a", "receipt"])
