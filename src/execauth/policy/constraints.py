"""Bound grants: the ``constraints`` a permit (or escalate) rule puts into its PERMIT.

A constraint is a name and a JSON value the executor must respect (docs/policy-language.md,
"Constraints"). The value is written literally or computed from the request by CEL
(``{cel: "payload.amount"}``). This module holds what both forms share: which names exist,
which values each accepts, and how large a value may be. It is pure; the policy document
checks literal values at publish, the engine checks computed ones at every evaluation
(a value that fails here is SILENCE, never a PERMIT without its constraints).

The executor's side (what each constraint means for the work it is about to do) is in the
SDKs' intent checks (``execauth_client.intent``, ``sdk/typescript/src/intent.ts``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from execauth.canonical import CanonicalizationError, canonical_json

# The constraints every executor understands (the SDKs' intent checks implement each).
MAX_AMOUNT = "max_amount"
CURRENCY = "currency"
ALLOWED_COMMANDS = "allowed_commands"
ALLOWED_RESOURCES = "allowed_resources"
ALLOWED_TOOL_ARGS = "allowed_tool_args"
WELL_KNOWN = (MAX_AMOUNT, CURRENCY, ALLOWED_COMMANDS, ALLOWED_RESOURCES, ALLOWED_TOOL_ARGS)
# An organization's own constraint: only an executor given a checker for it can honour it
# (the SDKs refuse a PERMIT carrying one they cannot check), so the prefix makes it visible.
CUSTOM_NAME = re.compile(r"^x_[a-z0-9_]{1,62}\Z")

MAX_CONSTRAINTS = 16  # per rule
MAX_VALUE_BYTES = 4096  # the canonical JSON of one value: receipts stay small
MAX_LIST_ENTRIES = 256
CURRENCY_PATTERN = re.compile(r"^[A-Z]{3}\Z")  # ISO 4217 alphabetic code
CEL_KEY = "cel"  # ``{cel: "<expression>"}``: the value is computed from the request


def name_problem(name: object) -> str | None:
    """Why ``name`` is not a constraint name, or ``None``."""
    if isinstance(name, str) and (name in WELL_KNOWN or CUSTOM_NAME.match(name)):
        return None
    return (
        f"unknown constraint {name!r} (known: {', '.join(WELL_KNOWN)}; "
        "an organization's own names start with x_)"
    )


def expression_of(value: object) -> str | None:
    """The CEL source when ``value`` is the computed form ``{cel: "..."}``, else ``None``.

    Only a mapping whose one key is ``cel`` is an expression; a literal mapping of that
    exact shape is written as a CEL map literal instead (``{cel: '{"cel": 1}'}``).
    """
    if isinstance(value, Mapping) and len(value) == 1 and CEL_KEY in value:
        source = value[CEL_KEY]
        return source if isinstance(source, str) else ""
    return None


def value_problem(name: str, value: Any) -> str | None:
    """Why ``value`` cannot be the value of constraint ``name``, or ``None``."""
    try:
        size = len(canonical_json(value))
    except (CanonicalizationError, TypeError, ValueError, UnicodeError) as exc:
        return f"{name} is not JSON data: {exc}"
    if size > MAX_VALUE_BYTES:
        return f"{name} is {size} bytes of JSON, more than {MAX_VALUE_BYTES}"
    if name == MAX_AMOUNT:
        return None if _is_amount(value) else f"{name} must be a number >= 0"
    if name == CURRENCY:
        if isinstance(value, str) and CURRENCY_PATTERN.match(value):
            return None
        return f"{name} must be a three-letter ISO 4217 code such as 'EUR'"
    if name == ALLOWED_COMMANDS:
        return _commands_problem(value)
    if name == ALLOWED_RESOURCES:
        if _string_list(value):
            return None
        return f"{name} must be a list of at most {MAX_LIST_ENTRIES} non-empty strings"
    if name == ALLOWED_TOOL_ARGS:
        return _tool_args_problem(value)
    return None  # an x_ constraint: any JSON value


def _is_number(value: object) -> bool:
    # bool is an int in Python, never an amount in JSON.
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_amount(value: object) -> bool:
    return _is_number(value) and value >= 0  # type: ignore[operator]


def _string_list(value: object) -> bool:
    return (
        isinstance(value, list)
        and len(value) <= MAX_LIST_ENTRIES
        and all(isinstance(v, str) and v for v in value)
    )


def _commands_problem(value: object) -> str | None:
    """A non-empty list; each entry a program name (``"git"``) or an exact argv list."""
    shape = (
        f"{ALLOWED_COMMANDS} must be a non-empty list of program names (strings) "
        "or exact argv lists (non-empty lists of strings)"
    )
    if not isinstance(value, list) or not value or len(value) > MAX_LIST_ENTRIES:
        return shape
    for entry in value:
        if isinstance(entry, str):
            if not entry or "\0" in entry:
                return shape
        elif not (isinstance(entry, list) and entry and _string_list(entry)):
            return shape
    return None


def _tool_args_problem(value: object) -> str | None:
    """A mapping of argument name to a list of allowed values or ``{min, max}`` bounds."""
    if not isinstance(value, dict) or not value:
        return f"{ALLOWED_TOOL_ARGS} must be a non-empty mapping of argument name to a rule"
    for arg, rule in value.items():
        where = f"{ALLOWED_TOOL_ARGS}.{arg}"
        if isinstance(rule, list):
            if len(rule) > MAX_LIST_ENTRIES:
                return f"{where} lists more than {MAX_LIST_ENTRIES} values"
            continue
        if not isinstance(rule, dict) or not rule or set(rule) - {"min", "max"}:
            return f"{where} must be a list of allowed values or a mapping with min and/or max"
        bounds = [rule[k] for k in ("min", "max") if k in rule]
        if not all(_is_number(b) for b in bounds):
            return f"{where}: min and max must be numbers"
        if "min" in rule and "max" in rule and rule["min"] > rule["max"]:
            return f"{where}: min is greater than max"
    return None
