"""The intent check: is what I am about to do covered by this PERMIT, constraints included?

``verify`` / ``require_permit`` answer "is this an authentic, unexpired PERMIT for this
request". A bound grant (docs/receipts.md, "Constraints") adds limits the executor itself
must respect: a transfer of at most ``max_amount``, only ``allowed_commands``… This module
checks a concrete action against them, offline, and fails closed: a constraint the intent
does not state a value for, or that this SDK does not know, refuses.

    check = check_intent(receipt, Intent(surface="payments.transfer", actor="agent-7",
                                         amount=Decimal("120.00"), currency="EUR"))
    if not check.ok:
        raise SystemExit(check.reason)      # e.g. "constraint_exceeded:max_amount"

Reason codes (``IntentCheck.reason``), the first problem found, in this order:

- ``not_permit`` (the decision is not PERMIT), ``malformed_receipt`` (no valid
  ``expires_at``, or ``constraints`` not an object), ``expired``;
- ``surface_mismatch``, ``action_mismatch``, ``actor_mismatch``, ``request_digest_mismatch``;
- per constraint, by name in sorted order: ``constraint_unknown:<name>`` (no checker for
  it), ``constraint_malformed:<name>`` (the receipt's value has the wrong shape),
  ``constraint_unverifiable:<name>`` (the intent states no value to check),
  ``constraint_exceeded:<name>`` (the value is outside the grant). For
  ``allowed_tool_args`` the name is ``allowed_tool_args.<argument>``.

The well-known constraints:

- ``max_amount``: ``intent.amount`` (a number; ``Decimal`` compares exactly) ≤ the limit.
- ``currency``: ``intent.currency`` equals it exactly (``"EUR"``, case-sensitive).
- ``allowed_commands``: ``intent.command`` is an argv list (a plain string is refused: no
  shell splitting). An entry that is a string matches when it equals ``argv[0]`` exactly
  (``"git"`` does not match ``"/usr/bin/git"``, nothing is resolved or globbed); an entry
  that is a list matches when it equals the whole argv.
- ``allowed_resources``: every element of ``intent.resources`` is in the list (exact).
- ``allowed_tool_args``: for each named argument, ``intent.tool_args`` has it (an absent
  argument is refused: the tool's default is unknown) and its value is one of the listed
  values (JSON equality: ``1`` equals ``1.0``, ``true`` is not ``1``) or, for a
  ``{min, max}`` rule, a number within the bounds (inclusive). Unnamed arguments are free.

An organization's own ``x_…`` constraints are checked only by a checker passed in
``checkers`` (a function of the constraint's value and the intent returning ``None`` when
satisfied or a short explanation when not); without one the PERMIT is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from execauth_client import _wire
from execauth_client.errors import NotPermitted
from execauth_client.receipt import Receipt
from execauth_client.verify import parse_timestamp

Number = int | float | Decimal
Checker = Callable[[Any, "Intent"], str | None]


@dataclass(frozen=True, slots=True)
class Intent:
    """What the executor is about to do. Give every value the PERMIT may constrain.

    ``request`` (the execute body: ``surface``, ``action``, ``actor``, ``context``,
    ``payload``) may stand in for ``request_digest``: its digest is computed as the
    service computes it.
    """

    surface: str
    action: str | None = None
    actor: str | None = None
    request_digest: str | None = None
    request: Mapping[str, Any] | None = None
    amount: Number | None = None
    currency: str | None = None
    command: Sequence[str] | None = None
    resources: Sequence[str] | None = None
    tool_args: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class IntentCheck:
    """``ok``, or ``reason`` (a stable code, see the module) and ``detail`` (for people)."""

    ok: bool
    reason: str | None
    detail: str


class IntentRefused(NotPermitted):
    """The PERMIT does not cover the intended work; ``code`` is the reason code."""

    def __init__(self, check: IntentCheck, receipt: Receipt) -> None:
        super().__init__(f"{check.reason}: {check.detail}", receipt)
        self.code = check.reason or "refused"
        self.check = check


def check_intent(
    receipt: Receipt | Mapping[str, Any],
    intent: Intent,
    *,
    now: datetime | None = None,
    checkers: Mapping[str, Checker] | None = None,
) -> IntentCheck:
    """Check ``intent`` against an already verified PERMIT; never raises on bad receipts."""
    raw = receipt.raw if isinstance(receipt, Receipt) else receipt
    problem = _receipt_problem(raw, intent, now or datetime.now(UTC))
    if problem is None:
        problem = _constraints_problem(raw.get("constraints"), intent, checkers or {})
    if problem is None:
        return IntentCheck(True, None, "the PERMIT covers this intent")
    return IntentCheck(False, problem[0], problem[1])


def check_constraints(
    receipt: Receipt | Mapping[str, Any],
    intent: Intent,
    *,
    checkers: Mapping[str, Checker] | None = None,
) -> IntentCheck:
    """Only the bound grant of ``receipt`` against ``intent``: for a caller that has
    already checked decision, expiry, surface, actor and digest (``require_permit``)."""
    raw = receipt.raw if isinstance(receipt, Receipt) else receipt
    problem = _constraints_problem(raw.get("constraints"), intent, checkers or {})
    if problem is None:
        return IntentCheck(True, None, "the PERMIT's constraints cover this intent")
    return IntentCheck(False, problem[0], problem[1])


def require_intent(
    receipt: Receipt,
    intent: Intent,
    *,
    now: datetime | None = None,
    checkers: Mapping[str, Checker] | None = None,
) -> Receipt:
    """``receipt`` when it covers ``intent``; else raise ``IntentRefused``."""
    check = check_intent(receipt, intent, now=now, checkers=checkers)
    if not check.ok:
        raise IntentRefused(check, receipt)
    return receipt


Problem = tuple[str, str]


def _receipt_problem(raw: Mapping[str, Any], intent: Intent, now: datetime) -> Problem | None:
    if raw.get("decision") != "PERMIT":
        return "not_permit", f"the decision is {raw.get('decision')!r}, not PERMIT"
    try:
        expires_at = parse_timestamp(raw.get("expires_at"))
    except ValueError:
        return "malformed_receipt", "the PERMIT has no valid expires_at"
    if now >= expires_at:
        return "expired", f"the PERMIT expired at {raw.get('expires_at')}"
    for name, wanted in (
        ("surface", intent.surface),
        ("action", intent.action),
        ("actor", intent.actor),
    ):
        if raw.get(name) != wanted:
            return f"{name}_mismatch", f"the PERMIT is for {name} {raw.get(name)!r}, not {wanted!r}"
    digest = intent.request_digest
    if digest is None and intent.request is not None:
        digest = _digest(intent.request)
    if digest is not None and raw.get("request_digest") != digest:
        return "request_digest_mismatch", "the PERMIT was issued for a different request"
    return None


def _digest(request: Mapping[str, Any]) -> str:
    return _wire.request_digest(
        str(request.get("surface")),
        actor=request.get("actor"),
        action=request.get("action"),
        context=request.get("context"),
        payload=request.get("payload"),
    )


def _constraints_problem(
    constraints: object, intent: Intent, checkers: Mapping[str, Checker]
) -> Problem | None:
    if constraints is None:
        return None
    if not isinstance(constraints, Mapping):
        return "malformed_receipt", "constraints is not a JSON object"
    for name in sorted(constraints):
        value = constraints[name]
        custom = checkers.get(name)
        if custom is not None:
            explanation = custom(value, intent)
            if explanation is not None:
                return f"constraint_exceeded:{name}", explanation
            continue
        check = _CHECKS.get(name)
        if check is None:
            return f"constraint_unknown:{name}", f"this executor cannot check constraint {name!r}"
        problem = check(value, intent)
        if problem is not None:
            return problem
    return None


def _max_amount(limit: Any, intent: Intent) -> Problem | None:
    name = "max_amount"
    bound = _decimal(limit)
    if bound is None:
        return f"constraint_malformed:{name}", f"max_amount {limit!r} is not a number"
    amount = _decimal(intent.amount)
    if amount is None:
        return f"constraint_unverifiable:{name}", "the intent states no amount"
    if amount > bound:
        return f"constraint_exceeded:{name}", f"amount {amount} is more than {bound}"
    return None


def _currency(currency: Any, intent: Intent) -> Problem | None:
    name = "currency"
    if not isinstance(currency, str):
        return f"constraint_malformed:{name}", "currency is not a string"
    if intent.currency is None:
        return f"constraint_unverifiable:{name}", "the intent states no currency"
    if intent.currency != currency:
        return f"constraint_exceeded:{name}", f"currency {intent.currency!r} is not {currency!r}"
    return None


def _allowed_commands(entries: Any, intent: Intent) -> Problem | None:
    name = "allowed_commands"
    if not isinstance(entries, list) or not all(_is_command_entry(e) for e in entries):
        return f"constraint_malformed:{name}", "allowed_commands is not a list of commands"
    argv = intent.command
    if argv is None or isinstance(argv, str) or not _strings(argv) or not argv:
        # A string would need shell splitting, whose rules are the executor's surprise.
        return f"constraint_unverifiable:{name}", "the intent states no command as an argv list"
    argv = list(argv)
    for entry in entries:
        if entry == argv[0] if isinstance(entry, str) else entry == argv:
            return None
    return f"constraint_exceeded:{name}", f"command {argv[0]!r} is not allowed"


def _allowed_resources(allowed: Any, intent: Intent) -> Problem | None:
    name = "allowed_resources"
    if not isinstance(allowed, list) or not _strings(allowed):
        return f"constraint_malformed:{name}", "allowed_resources is not a list of strings"
    resources = intent.resources
    if resources is None or isinstance(resources, str) or not _strings(resources):
        return f"constraint_unverifiable:{name}", "the intent states no list of resources"
    for resource in resources:
        if resource not in allowed:
            return f"constraint_exceeded:{name}", f"resource {resource!r} is not allowed"
    return None


def _allowed_tool_args(rules: Any, intent: Intent) -> Problem | None:
    if not isinstance(rules, Mapping):
        return "constraint_malformed:allowed_tool_args", "allowed_tool_args is not an object"
    for arg in sorted(rules):
        code = f"allowed_tool_args.{arg}"
        rule = rules[arg]
        if intent.tool_args is None or arg not in intent.tool_args:
            return f"constraint_unverifiable:{code}", f"the intent has no argument {arg!r}"
        value = intent.tool_args[arg]
        if isinstance(rule, list):
            if not any(_json_equal(value, allowed) for allowed in rule):
                return f"constraint_exceeded:{code}", f"{arg}={value!r} is not an allowed value"
            continue
        if not isinstance(rule, Mapping) or not rule or set(rule) - {"min", "max"}:
            return f"constraint_malformed:{code}", f"the rule for {arg!r} is not values or bounds"
        low, high = _decimal(rule.get("min")), _decimal(rule.get("max"))
        if ("min" in rule and low is None) or ("max" in rule and high is None):
            return f"constraint_malformed:{code}", f"the bounds of {arg!r} are not numbers"
        number = _decimal(value)
        if number is None:
            return f"constraint_exceeded:{code}", f"{arg}={value!r} is not a number"
        if (low is not None and number < low) or (high is not None and number > high):
            return f"constraint_exceeded:{code}", f"{arg}={value!r} is outside its bounds"
    return None


_CHECKS: dict[str, Callable[[Any, Intent], Problem | None]] = {
    "max_amount": _max_amount,
    "currency": _currency,
    "allowed_commands": _allowed_commands,
    "allowed_resources": _allowed_resources,
    "allowed_tool_args": _allowed_tool_args,
}


def _decimal(value: object) -> Decimal | None:
    """A finite number as a ``Decimal`` (from its shortest text: 0.1 stays 0.1); else None."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return None
    try:
        number = value if isinstance(value, Decimal) else Decimal(repr(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _strings(values: object) -> bool:
    return isinstance(values, Sequence) and all(isinstance(v, str) for v in values)


def _is_command_entry(entry: object) -> bool:
    if isinstance(entry, str):
        return bool(entry)
    return isinstance(entry, list) and bool(entry) and _strings(entry)


def _json_equal(a: object, b: object) -> bool:
    """Equality of JSON values: numbers by value, but a boolean is never a number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    numbers = _decimal(a), _decimal(b)
    if numbers[0] is not None and numbers[1] is not None:
        return numbers[0] == numbers[1]
    return type(a) is type(b) and a == b
