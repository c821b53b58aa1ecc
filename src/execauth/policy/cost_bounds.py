"""Bounds on what evaluating a CEL syntax tree costs, as polynomials in request measures.

An abstract interpretation of the tree (``policy.cost`` explains the rule it applies):
each node gets a ``Bound`` on the steps its evaluation takes and a ``Value`` bounding
what it computes (length, weight, element weight, longest string), children first.
Variables of the polynomials are the measures of the request: ``n`` (the most elements
of one list or map), ``T`` (the weight of the whole request), ``E`` (the heaviest list
element) and ``S`` (the longest string). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from execauth.policy.cel_syntax import Node
from execauth.policy.regex_cost import (
    REGEX_NOT_LITERAL,
    REGEX_SCAN_CHARS_PER_STEP,
    regex_compile_steps,
)

MAP_ENTRY = 3  # a map entry weighs its key, its hashing and its value (measured ~4× a list item)
ITERATION = 6  # the fixed cost of one comprehension step (~190 ns)
CHARS_PER_STEP = 64  # copying, comparing or searching strings (memcpy-fast)

COPYING_MACROS = frozenset({"map", "filter"})
# The timestamp accessors; their time-zone form (``now.getHours("Europe/Paris")``) is
# not implemented by the ``cel`` package: it compiles, then fails at every evaluation.
TIMESTAMP_ACCESSORS = frozenset(
    {
        "getFullYear", "getMonth", "getDayOfYear", "getDayOfMonth", "getDate", "getDayOfWeek",
        "getHours", "getMinutes", "getSeconds", "getMilliseconds",
    }
)  # fmt: skip
_SCANNING = frozenset({"size", "contains", "startsWith", "endsWith"})
_SCALAR_RESULT = frozenset({"int", "uint", "double", "bool", "type", "timestamp", "duration"})

Monomial = tuple[int, int, int, int]  # the exponents of n, T, E and S


@dataclass(frozen=True, slots=True)
class Bound:
    """A polynomial in (n, T, E, S) with non-negative coefficients: an upper bound."""

    terms: Mapping[Monomial, float] = field(default_factory=dict)

    @classmethod
    def of(cls, constant: float = 0.0, **variables: float) -> Bound:
        """``Bound.of(2, T=1)`` is 2 + T; each keyword is one variable to the first power."""
        terms: dict[Monomial, float] = {(0, 0, 0, 0): constant} if constant else {}
        for name, coefficient in variables.items():
            n, t, e, s = (int(name == v) for v in "nTES")
            terms[(n, t, e, s)] = coefficient
        return cls(terms)

    def __add__(self, other: Bound) -> Bound:
        terms = dict(self.terms)
        for monomial, coefficient in other.terms.items():
            terms[monomial] = terms.get(monomial, 0.0) + coefficient
        return Bound(terms)

    def __mul__(self, other: Bound) -> Bound:
        terms: dict[Monomial, float] = {}
        for (n1, t1, e1, s1), a in self.terms.items():
            for (n2, t2, e2, s2), b in other.terms.items():
                monomial = (n1 + n2, t1 + t2, e1 + e2, s1 + s2)
                terms[monomial] = terms.get(monomial, 0.0) + a * b
        return Bound(terms)

    def scaled(self, factor: float) -> Bound:
        return Bound({m: c * factor for m, c in self.terms.items()})

    def join(self, other: Bound) -> Bound:
        """An upper bound of both (coefficient by coefficient: the variables are ≥ 0)."""
        terms = dict(self.terms)
        for monomial, coefficient in other.terms.items():
            terms[monomial] = max(terms.get(monomial, 0.0), coefficient)
        return Bound(terms)

    def least(self, other: Bound) -> Bound:
        """An upper bound of the smaller of the two: either one is; prefer a constant."""
        if self.degree() != other.degree():
            return self if self.degree() < other.degree() else other
        return self if self.at((1, 1, 1, 1)) <= other.at((1, 1, 1, 1)) else other

    def degree(self) -> int:
        return max((sum(m) for m, c in self.terms.items() if c), default=0)

    def at(self, size: tuple[int, int, int, int]) -> float:
        n, t, e, s = size
        try:
            return float(
                sum(c * n**a * t**b * e**k * s**d for (a, b, k, d), c in self.terms.items())
            )
        except OverflowError:  # beyond any float: certainly over the limit
            return float("inf")


ZERO = Bound()
ONE = Bound.of(1)


@dataclass(frozen=True, slots=True)
class Value:
    """Bounds on a value an expression computes."""

    length: Bound  # elements of a list or map, characters of a string: how often to iterate
    weight: Bound  # what copying or walking it costs
    element: Bound  # the weight of one element (what a comprehension variable copies)
    chars: Bound  # the longest string in it


SCALAR = Value(ZERO, ONE, ZERO, ZERO)
INPUT = Value(Bound.of(n=1), Bound.of(T=1), Bound.of(E=1), Bound.of(S=1))


Result = tuple[Bound, Value]  # (cost of evaluating the node, bounds on its value)


@dataclass(slots=True)
class _Frame:
    node: Node
    scope: Mapping[str, Value]  # comprehension variables in scope
    done: list[Result]


def tree_cost(tree: Node) -> Result:
    """Cost and value bounds of ``tree``, children first (iteratively: ``+`` chains are deep)."""
    stack = [_Frame(tree, {}, [])]
    while True:
        frame = stack[-1]
        if len(frame.done) < len(frame.node.children):
            scope = frame.scope
            if frame.node.kind == "macro" and frame.done:  # the body sees the variable
                scope = {**scope, str(frame.node.value): _element_of(frame.done[0][1])}
            stack.append(_Frame(frame.node.children[len(frame.done)], scope, []))
            continue
        result = _combine(frame.node, frame.scope, frame.done)
        stack.pop()
        if not stack:
            return result
        stack[-1].done.append(result)


def _combine(node: Node, scope: Mapping[str, Value], done: Sequence[Result]) -> Result:
    own = sum((cost for cost, _ in done), ONE)  # every node: its children, plus one step
    values = [value for _, value in done]
    kind = node.kind
    if kind == "literal":
        text = len(node.value) if isinstance(node.value, str | bytes) else 0
        return own, Value(Bound.of(text), ONE, ZERO, Bound.of(text))
    if kind == "ident":
        return own, scope.get(node.name, SCALAR if node.name == "now" else INPUT)
    if kind in {"select", "index"}:  # copies what it selects, at most the whole operand
        return own + values[0].weight, values[0]
    if kind == "has":
        return own, SCALAR
    if kind in {"list", "map", "message"}:
        return _collection(kind, own, values)
    if kind == "unary":
        return own, SCALAR
    if kind == "conditional":
        return own, _join(values[1:])
    if kind == "binary":
        return _binary(node.name, own, values)
    if kind == "macro":
        return _comprehension(node.name, done)
    return _call(node, own, values)


def _collection(kind: str, own: Bound, values: list[Value]) -> Result:
    if kind == "list":
        members, per_entry = values, ZERO
    else:  # map literal (keys and values alternate) or message: entries are hashed
        members, per_entry = values[1::2] if kind == "map" else values, Bound.of(MAP_ENTRY)
    weight = sum((v.weight + per_entry for v in members), ONE)
    count = Bound.of(len(members))
    keys = values[0::2] if kind == "map" else members
    return own + count, Value(count, weight, _join(keys).weight, _join(values).chars)


def _binary(operator: str, own: Bound, values: list[Value]) -> Result:
    left, right = values
    if operator == "+":  # numbers, or a new list or string holding both operands
        joined = Value(
            left.length + right.length,
            left.weight + right.weight,
            left.element.join(right.element),
            left.chars + right.chars,
        )
        scan = (left.chars + right.chars).scaled(1 / CHARS_PER_STEP)
        return own + joined.weight + scan, joined
    if operator == "in":  # a walk through the right operand, each element compared
        scan = right.length * left.chars.scaled(1 / CHARS_PER_STEP)
        return own + right.weight + scan, SCALAR
    if operator in {"==", "!=", "<", "<=", ">", ">="}:  # stops at the smaller operand
        smaller = left.weight.least(right.weight) + left.chars.least(right.chars).scaled(
            1 / CHARS_PER_STEP
        )
        return own + smaller, SCALAR
    return own, SCALAR  # && || - * / %


def _comprehension(macro: str, done: Sequence[Result]) -> Result:
    (receiver_cost, receiver), *body = done
    steps = receiver.length
    per_step = sum((cost for cost, _ in body), Bound.of(ITERATION) + receiver.element)
    cost = receiver_cost + ONE + steps * per_step
    if macro not in COPYING_MACROS:
        return cost, SCALAR
    # map and filter copy their growing result on every step: quadratic in the steps.
    item = body[-1][1].weight if macro == "map" else receiver.element
    result = Value(steps, ONE + steps * item, item, body[-1][1].chars.join(receiver.chars))
    return cost + steps * steps * item, result


def _call(node: Node, own: Bound, values: list[Value]) -> Result:
    name, scanned = node.name, _join(values)
    if name in TIMESTAMP_ACCESSORS:
        return own, SCALAR
    scan = sum((v.chars for v in values), ZERO).scaled(1 / CHARS_PER_STEP)
    if name == "matches" and len(values) == 2:
        pattern = node.children[-1]
        if pattern.kind == "literal" and isinstance(pattern.value, str):
            compile_steps = Bound.of(regex_compile_steps(pattern.value))
        else:  # a pattern only known at evaluation: its text bounds nothing (regex_cost)
            compile_steps = Bound.of(REGEX_NOT_LITERAL)
        scan = values[0].chars.scaled(1 / REGEX_SCAN_CHARS_PER_STEP)
        return own + compile_steps + scan, SCALAR
    if name in _SCANNING:
        return own + scan, SCALAR
    # Conversions and anything else: they may copy their arguments.
    copied = sum((v.weight for v in values), ZERO)
    return own + copied + scan, SCALAR if name in _SCALAR_RESULT else scanned


def _element_of(receiver: Value) -> Value:
    """A comprehension variable: one element of the receiver (or a key of a map)."""
    return Value(receiver.element, receiver.element, receiver.element, receiver.chars)


def _join(values: Sequence[Value]) -> Value:
    joined = Value(ZERO, ONE, ZERO, ZERO)
    for v in values:
        joined = Value(
            joined.length.join(v.length),
            joined.weight.join(v.weight),
            joined.element.join(v.element),
            joined.chars.join(v.chars),
        )
    return joined


def macro_depth(tree: Node) -> int:
    """How deeply comprehensions nest; a receiver is not nested in its own macro."""
    deepest = 0
    pending = [(tree, 0)]
    while pending:
        node, depth = pending.pop()
        if node.kind == "macro":
            deepest = max(deepest, depth + 1)
            pending.append((node.children[0], depth))
            pending.extend((child, depth + 1) for child in node.children[1:])
        else:
            pending.extend((child, depth) for child in node.children)
    return deepest
