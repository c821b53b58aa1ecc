"""The intent check (execauth_client.intent): the shared intent vectors, custom checkers,
and the raising form. The receipt of each vector is authentic (tests/test_vectors.py)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from conftest import VECTORS_DIR, read_json
from execauth_client import (
    Intent,
    IntentRefused,
    NotPermitted,
    Receipt,
    check_intent,
    require_intent,
)
from execauth_client.verify import parse_timestamp

INTENTS: list[dict[str, Any]] = read_json(VECTORS_DIR / "intent.json")["cases"]
BOUND = read_json(VECTORS_DIR / "cases" / "permit-with-constraints-valid.json")
CUSTOM = read_json(VECTORS_DIR / "cases" / "permit-with-custom-constraint-valid.json")
NOW = parse_timestamp("2026-01-01T00:00:00Z")


def _receipt(path: str) -> Receipt:
    return Receipt.from_dict(read_json(VECTORS_DIR / path)["receipt"])


@pytest.mark.parametrize("case", INTENTS, ids=[c["name"] for c in INTENTS])
def test_sdk_intent_check_agrees_with_the_vector(case: dict[str, Any]) -> None:
    check = check_intent(
        _receipt(case["receipt"]), Intent(**case["intent"]), now=parse_timestamp(case["now"])
    )
    assert {"ok": check.ok, "reason": check.reason} == case["expected"], check.detail


def _transfer(**changes: Any) -> Intent:
    values: dict[str, Any] = {
        "surface": "payments.transfer",
        "action": "transfer",
        "actor": "agent-7",
        "amount": Decimal("120.00"),
        "currency": "EUR",
        "command": ["git", "status"],
        "resources": ["acct-42"],
        "tool_args": {"to": "acct-42", "fee": 0},
    }
    return Intent(**(values | changes))


def test_the_receipt_exposes_its_bound_grant() -> None:
    receipt = Receipt.from_dict(BOUND["receipt"])
    assert receipt.constraints is not None
    assert receipt.constraints["max_amount"] == 500
    assert receipt.single_use is True


def test_a_decimal_amount_compares_exactly() -> None:
    receipt = Receipt.from_dict(BOUND["receipt"])
    assert check_intent(receipt, _transfer(amount=Decimal("500.00")), now=NOW).ok
    over = check_intent(receipt, _transfer(amount=Decimal("500.000001")), now=NOW)
    assert over.reason == "constraint_exceeded:max_amount"


def test_the_request_stands_in_for_its_digest() -> None:
    receipt = Receipt.from_dict(BOUND["receipt"])
    request = {
        "surface": "payments.transfer",
        "action": "transfer",
        "actor": "agent-7",
        "payload": {"amount": 120, "currency": "EUR", "to": "acct-42"},
    }
    assert check_intent(receipt, _transfer(request=request), now=NOW).ok
    other = request | {"payload": {"amount": 121, "currency": "EUR", "to": "acct-42"}}
    assert check_intent(receipt, _transfer(request=other), now=NOW).reason == (
        "request_digest_mismatch"
    )


def test_an_expired_permit_covers_nothing() -> None:
    receipt = Receipt.from_dict(BOUND["receipt"])
    later = parse_timestamp("2099-01-01T00:00:00Z")
    assert check_intent(receipt, _transfer(), now=later).reason == "expired"


def test_a_custom_checker_decides_its_own_constraint() -> None:
    receipt = Receipt.from_dict(CUSTOM["receipt"])
    seen: list[Any] = []

    def region(value: Any, intent: Intent) -> str | None:
        seen.append(value)
        return None if value == "eu-west-1" else "wrong region"

    assert check_intent(receipt, _transfer(), now=NOW, checkers={"x_region": region}).ok
    assert seen == ["eu-west-1"]


def test_a_failing_custom_checker_refuses_with_its_explanation() -> None:
    receipt = Receipt.from_dict(CUSTOM["receipt"])
    check = check_intent(
        receipt, _transfer(), now=NOW, checkers={"x_region": lambda value, intent: "not here"}
    )
    assert (check.ok, check.reason, check.detail) == (
        False,
        "constraint_exceeded:x_region",
        "not here",
    )


def test_require_intent_raises_a_not_permitted_with_the_code() -> None:
    receipt = Receipt.from_dict(BOUND["receipt"])
    with pytest.raises(IntentRefused) as caught:
        require_intent(receipt, _transfer(currency="USD"), now=NOW)
    assert caught.value.code == "constraint_exceeded:currency"
    assert isinstance(caught.value, NotPermitted)


def test_require_intent_returns_the_receipt_when_covered() -> None:
    receipt = Receipt.from_dict(BOUND["receipt"])
    assert require_intent(receipt, _transfer(), now=NOW) is receipt
