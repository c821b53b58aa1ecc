"""Bounded evaluation: what a CEL condition may cost, bounded before it runs.

The ``cel`` evaluator is Rust code that holds the GIL, so a slow expression cannot be
interrupted by a Python timer: it must be refused before it starts. One rule covers
every expression, with or without comprehensions: **each operation is charged the
work it does on the values it touches** (measured with ``cel`` 0.10, see
docs/policy-language.md "Bounded evaluation"):

* selecting a field or element copies it: ``context.xs`` costs the size of ``xs``;
* ``+`` builds its result: the sizes of both operands (so ``l + l + … + l`` with ``k``
  terms costs about ``k²/2`` copies of ``l``);
* comparisons and ``in`` walk their operands; string functions scan their strings;
* ``matches`` compiles its pattern on every call (``policy.regex_cost``) and scans;
* a comprehension runs its body once per element, copying the element; ``map`` and
  ``filter`` also copy their growing result on every step (quadratic).

The size of a value read from the request is bounded by measures of the request,
taken once per evaluation (``InputSize``): ``n`` the most elements of one list or map,
``T`` the weight of the whole request, ``E`` the heaviest list element, ``S`` the
longest string. A value computed by the expression is bounded by its operands. So
each rule's cost is a polynomial in (n, T, E, S), derived once from its syntax tree
at compile time and evaluated per request in microseconds; a rule whose bound
exceeds ``MAX_EVALUATION_COST`` is not run (SILENCE). One step is about one element
copied, 30–40 ns. Publishing refuses what cannot be bounded or exceeds the limit even
for an empty request. Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from execauth.policy.cel_syntax import CelSyntaxError, parse, walk
from execauth.policy.cost_bounds import (
    MAP_ENTRY,
    TIMESTAMP_ACCESSORS,
    Bound,
    macro_depth,
    tree_cost,
)

MAX_EXPRESSION_LENGTH = 2048
MAX_MACRO_DEPTH = 2
MAX_EVALUATION_COST = 1_000_000


@dataclass(frozen=True, slots=True)
class InputSize:
    """The measures of an evaluation input: computed once per request, used for every rule."""

    largest: int  # n: the most elements of any one list or map
    total: int  # T: the weight of the whole input (1 a scalar or string, MAP_ENTRY an entry)
    element: int = 1  # E: the weight of the heaviest list element
    chars: int = 0  # S: the longest string, bytes or map key

    def as_tuple(self) -> tuple[int, int, int, int]:
        return self.largest, self.total, self.element, self.chars


@dataclass(frozen=True, slots=True)
class ExpressionCost:
    """What analysing one condition's syntax tree found; ``bound`` is None when unreadable."""

    bound: Bound | None
    depth: int = 0  # deepest nesting of comprehension macros (0: none)
    calls_with_arguments: tuple[str, ...] = ()  # names of calls given at least one argument
    unreadable: str | None = None  # why no bound could be derived
    # Every measure at most this keeps the bound within the limit (the bound grows with
    # each measure, and n, E <= T): most requests need no polynomial evaluated at all.
    always_within: int = 0

    def steps(self, size: InputSize) -> float:
        """The bound at ``size``; infinite when the expression could not be analysed."""
        return float("inf") if self.bound is None else self.bound.at(size.as_tuple())

    def within_limit(self, size: InputSize) -> bool:
        if max(size.total, size.chars) <= self.always_within:
            return True
        return self.steps(size) <= MAX_EVALUATION_COST

    def free_up_to(self) -> float:
        """``within_limit`` holds for every input whose ``max(total, chars)`` is at most this.

        Infinite when the bound is a constant within the limit (no input need be measured);
        negative when no input is within it (the bound is unknown or a constant over it).
        """
        if self.bound is None or self.unreadable is not None:
            return -1.0
        if all(monomial == (0, 0, 0, 0) for monomial in self.bound.terms):
            return math.inf if self.bound.at((0, 0, 0, 0)) <= MAX_EVALUATION_COST else -1.0
        return float(self.always_within)


def analyse(source: str) -> ExpressionCost:
    """Parse ``source`` and derive its cost bound, nesting depth and calls."""
    try:
        tree = parse(source)
    except CelSyntaxError as exc:
        return ExpressionCost(None, unreadable=str(exc))
    cost, _ = tree_cost(tree)
    calls = tuple(n.name for n in walk(tree) if n.kind == "call" and len(n.children) > n.receiver)
    return ExpressionCost(cost, macro_depth(tree), calls, None, _always_within(cost))


def _always_within(bound: Bound) -> int:
    """The largest power of two ``m`` with ``bound(m, m, m, m)`` within the limit (0: none)."""
    if bound.at((1, 1, 1, 1)) > MAX_EVALUATION_COST:
        return 0
    m = 1
    while m < 2**24 and bound.at((2 * m,) * 4) <= MAX_EVALUATION_COST:
        m *= 2
    return m


def publish_problems(source: str, cost: ExpressionCost) -> list[str]:
    """Why an expression must be refused at publish time (empty when it may be published)."""
    problems: list[str] = []
    if len(source) > MAX_EXPRESSION_LENGTH:
        problems.append(f"expression exceeds {MAX_EXPRESSION_LENGTH} characters")
    if cost.unreadable is not None:
        problems.append(f"the expression's evaluation cost cannot be bounded: {cost.unreadable}")
    elif cost.depth > MAX_MACRO_DEPTH:
        problems.append(
            f"comprehension macros (all, exists, exists_one, map, filter) are nested "
            f"{cost.depth} deep; at most {MAX_MACRO_DEPTH} is allowed (evaluation cost grows "
            "as the list size to the power of the depth)"
        )
    elif (steps := cost.steps(EMPTY_REQUEST)) > MAX_EVALUATION_COST:
        problems.append(
            "the expression exceeds the evaluation cost limit even for an empty request "
            f"(estimated {steps:,.0f} steps > {MAX_EVALUATION_COST:,}; large regular "
            "expressions and literals count, and more so inside comprehensions)"
        )
    zoned = sorted({name for name in cost.calls_with_arguments if name in TIMESTAMP_ACCESSORS})
    if zoned:
        problems.append(
            f"{', '.join(zoned)} with an argument is not supported by the CEL evaluator and "
            "would fail at every evaluation (time zones are not implemented): timestamps are "
            "UTC; call it as a method without arguments, e.g. now.getHours(), or shift by a "
            'fixed offset: (now + duration("1h")).getHours()'
        )
    return problems


_ENCODE_JSON = msgspec.json.Encoder().encode


def size_bound(value: Any) -> int | None:
    """An upper bound on ``max(total, chars)`` of ``measure_input(value)``: the length of
    ``value``'s JSON form (msgspec, in C, about a sixth of the measure's time); None when
    msgspec writes none (a lone surrogate, a type it does not know, a value nested too deep).

    No JSON form is shorter than its value's weight or its longest string. A string or
    a key takes its characters (one byte or more each in UTF-8) and two quotes; bytes
    take their base64 form, longer than themselves; a scalar or a string weighs 1 and
    takes at least one byte; a list or map weighs 1 and takes its two brackets; a map
    entry weighs ``MAP_ENTRY`` (3) beside its value and takes a quoted key and a colon,
    at least 3 bytes. So a request small enough by this bound needs no measuring
    (``engine.evaluate``); tests/policy/test_cost.py holds it to ``measure_input`` on
    arbitrary values. msgspec reads a ``dict`` subclass's own entries, as the ``cel``
    package converts a plain ``dict``; an evaluation input is a decoder's plain values.
    """
    try:
        return len(_ENCODE_JSON(value))
    except Exception:  # noqa: BLE001 - any value msgspec refuses is measured instead
        return None


def measure_input(value: Any) -> InputSize:
    """The measures of ``value``; on every request, so written for speed (exact types first).

    Recursion is the fast way in Python; a value nested deeper than ``_RECURSION_DEPTH``
    (which a request may be, deeper than Python recurses) is measured iteratively.
    """
    try:
        return _measure_recursively(value)
    except (_TooDeep, RecursionError):
        return _measure_iteratively(value)


_RECURSION_DEPTH = 64


class _TooDeep(Exception):
    """``_measure_recursively`` met a value nested deeper than ``_RECURSION_DEPTH``."""


def _measure_recursively(value: Any) -> InputSize:
    largest = element = chars = 0

    def collection(item: Any, is_list: bool, depth: int) -> int:
        """The weight of a list, tuple or mapping, updating the other measures on the way."""
        nonlocal largest, element, chars
        if depth > _RECURSION_DEPTH:
            raise _TooDeep
        size = len(item)
        if size > largest:
            largest = size
        if is_list:
            weight, children = 1, item
        else:
            for key in item:
                if type(key) in (str, bytes) and len(key) > chars:
                    chars = len(key)
            weight, children = 1 + MAP_ENTRY * size, item.values()
        for child in children:
            kind = type(child)
            if kind is str or kind is bytes:
                if len(child) > chars:
                    chars = len(child)
                child_weight = 1
            elif kind is list or kind is tuple:
                child_weight = collection(child, True, depth + 1)
            elif kind is dict:
                child_weight = collection(child, False, depth + 1)
            elif kind in _SCALARS or not isinstance(child, Mapping):
                child_weight = 1
            else:
                child_weight = collection(child, False, depth + 1)
            if is_list and child_weight > element:
                element = child_weight
            weight += child_weight
        return weight

    kind = type(value)
    if kind is list or kind is tuple:
        total = collection(value, True, 0)
    elif kind is dict or (kind not in (str, bytes) and isinstance(value, Mapping)):
        total = collection(value, False, 0)
    else:
        return _measure_iteratively(value)  # a scalar: nothing to recurse into
    return InputSize(largest, total, max(element, 1), chars)


_SCALARS = frozenset({int, float, bool, type(None)})  # common, and no Mapping


def _measure_iteratively(value: Any) -> InputSize:
    """``measure_input`` with an explicit stack, for values of any depth."""
    largest = element = chars = 0
    # Post-order: each open collection is [its children, its weight so far, is a list].
    stack: list[list[Any]] = []
    item: Any = value
    while True:
        kind = type(item)
        weight = 0  # 0 while the item is an open collection: every weight is at least 1
        if kind is str or kind is bytes:
            chars = max(chars, len(item))
            weight = 1
        elif kind is dict or (kind not in (list, tuple) and isinstance(item, Mapping)):
            largest = max(largest, len(item))
            for key in item:
                if type(key) in (str, bytes) and len(key) > chars:
                    chars = len(key)
            stack.append([iter(item.values()), 1 + MAP_ENTRY * len(item), False])
        elif kind is list or kind is tuple:
            largest = max(largest, len(item))
            stack.append([iter(item), 1, True])
        else:
            weight = 1
        while True:  # close every collection whose children are all measured
            if weight:
                if not stack:
                    return InputSize(largest, weight, max(element, 1), chars)
                frame = stack[-1]
                frame[1] += weight
                if frame[2] and weight > element:
                    element = weight
            frame = stack[-1]
            item = next(frame[0], _END)
            if item is not _END:
                break
            stack.pop()
            weight = frame[1]


_END = object()
# What an empty request measures: the publish-time check (``publish_problems``).
EMPTY_REQUEST = measure_input(
    {"surface": "a.b", "action": None, "actor": None, "context": {}, "payload": {},
     "org": {"id": "org_x", "plan": "free"}}
)  # fmt: skip
