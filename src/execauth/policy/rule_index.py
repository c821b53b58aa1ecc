"""Which rules of a block a request certainly cannot match, known before any of them runs.

A rule whose condition is a chain of ``&&`` at its top level (``context.branch == "main"
&& …``) is false whenever one of those conjuncts is false, whatever the others do: CEL's
``&&`` absorbs errors and non-boolean operands (``false && x`` and ``x && false`` are
``false`` for any ``x``, as the ``cel`` package evaluates them and the CEL language
definition specifies; tests/policy/test_rule_index.py holds the package to it). A conjunct
``path == literal`` is certainly false when the request holds, at that path, a value of
the literal's own CEL type that differs from it; ``path != literal`` when it holds the
literal itself; ``path in [literals]`` when the value is none of them; ``literal in path``
and ``path.exists(x, x == literal)`` when the value is a list of items of the literal's
type, none of them the literal. Such a rule evaluates to ``false`` with no error, so
``engine.evaluate`` need not run it: skipping it changes no outcome, rule, reason or
message, and the order of the rules that do run is kept.

Only what is certain is skipped. The value is read as the activation holds it: the
path must lead through plain dicts to a ``str`` (a CEL string), an ``int`` within
64 bits (a CEL int) or a ``bool`` (a CEL bool), the types ``cel.Context`` converts to
exactly those (the ``cel`` package, 0.10, ``RustyPyType::try_into_value``; a string that
looks like a number stays a string). A missing path, a null, another type (``1.0``
against ``1``, ``"1"`` against ``1``), a ``str`` or ``dict`` subclass, or a literal this
module cannot be sure it reads as the ``cel`` compiler does (a string written with a
backslash escape), and the rule runs. Built once per block at compile time; its only
state is a bounded cache of the rules left to run for each set of skipped ones.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeAlias, TypeVar

from execauth.policy.cel_ranges import INT_END, INT_MIN
from execauth.policy.cel_syntax import CelSyntaxError, Node, parse

# The variables whose values come straight from the request (or the org's facts); ``now``
# is a timestamp and never compared here.
_ROOTS = frozenset({"surface", "action", "actor", "context", "payload", "org"})
# Distinct request shapes remembered per block, each with the rules left to run: enough
# for the few values a block's indexed paths take in practice, bounded for any traffic.
_MAX_PLANS = 64
_MIN_RULES = 2  # rules a path must be able to exclude to be indexed
_MAX_ITEMS = 64  # a longer list is not looked through (each item is a lookup)

Literal: TypeAlias = tuple[str, str | int | bool]  # (CEL type, value): ("int", 1) != ("bool", True)
Rule = TypeVar("Rule")


@dataclass(frozen=True, slots=True)
class Conjunct:
    """One test of a path against literals, at the top of a rule's ``&&`` chain.

    ``equal``: false unless the value is one of ``literals`` (``path == "a"``, ``"a" ==
    path``, ``path in ["a", "b"]``); ``unequal``: false when it is the literal
    (``path != "a"``); ``member``: false unless the value, a list, holds the literal
    (``"a" in path``, ``path.exists(x, x == "a")``).
    """

    root: str
    keys: tuple[str, ...]
    test: str  # equal, unequal or member
    literals: tuple[Literal, ...]  # of one CEL type; one unless ``equal``


def conjuncts(source: str) -> list[Conjunct]:
    """The indexable conjuncts of ``source``; none when it cannot be read with certainty."""
    try:
        tree = parse(source)
    except CelSyntaxError:
        return []
    escapes = "\\" in source
    found: list[Conjunct] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        if node.kind == "binary" and node.name == "&&":
            pending.extend(node.children)
        elif (conjunct := _test(node, escapes=escapes)) is not None:
            found.append(conjunct)
    return found


def _test(node: Node, *, escapes: bool) -> Conjunct | None:
    """The conjunct ``node`` is, if it is one of the forms ``Conjunct`` names."""
    if node.kind == "binary" and node.name in ("==", "!="):
        left, right = node.children
        if left.kind == "literal":
            left, right = right, left
        literals = _literals([right], escapes=escapes)
        test = "equal" if node.name == "==" else "unequal"
    elif node.kind == "binary" and node.name == "in":
        left, right = node.children
        if right.kind == "list" and right.children:  # path in [literals]
            literals, test = _literals(right.children, escapes=escapes), "equal"
        else:  # literal in path
            left, right = right, left
            literals, test = _literals([right], escapes=escapes), "member"
    elif node.kind == "macro" and node.name == "exists" and len(node.children) == 2:
        left, predicate = node.children
        test, literals = "member", None
        if predicate.kind == "binary" and predicate.name == "==":
            variable, literal = predicate.children
            if variable.kind == "literal":
                variable, literal = literal, variable
            if variable.kind == "ident" and variable.name == node.value:
                literals = _literals([literal], escapes=escapes)
    else:
        return None
    path = _path(left)
    if path is None or literals is None:
        return None
    return Conjunct(path[0], path[1:], test, literals)


def _path(node: Node) -> tuple[str, ...] | None:
    """``("context", "branch")`` for ``context.branch``; None for anything else."""
    names: list[str] = []
    while node.kind == "select":
        names.append(node.name)
        node = node.children[0]
    if node.kind != "ident" or node.name not in _ROOTS:
        return None
    return (node.name, *reversed(names))


def _literals(nodes: Sequence[Node], *, escapes: bool) -> tuple[Literal, ...] | None:
    """The nodes as literals of one CEL type, or None."""
    found: list[Literal] = []
    for node in nodes:
        literal = _literal(node, escapes=escapes)
        if literal is None or (found and literal[0] != found[0][0]):
            return None
        found.append(literal)
    return tuple(found)


def _literal(node: Node, *, escapes: bool) -> Literal | None:
    if node.kind != "literal":
        return None
    value = node.value
    if node.name == "string" and isinstance(value, str) and not escapes:
        return ("string", value)
    if node.name == "int" and type(value) is int and INT_MIN <= value < INT_END:
        return ("int", value)
    if node.name == "bool" and type(value) is bool:
        return ("bool", value)
    return None


_KINDS: dict[type, str] = {str: "string", bool: "bool", int: "int"}


@dataclass(frozen=True, slots=True)
class PathIndex:
    """The rules testing one path, as bit masks over the block's rule positions."""

    root: str
    keys: tuple[str, ...]
    # CEL type -> rules with an ``equal`` test of that type; literal -> those it passes
    equal_any: dict[str, int] = field(default_factory=dict)
    equal: dict[Literal, int] = field(default_factory=dict)
    # literal -> rules with ``path != literal``
    unequal: dict[Literal, int] = field(default_factory=dict)
    # CEL type -> rules with a ``member`` test of that type; literal -> those it passes
    member_any: dict[str, int] = field(default_factory=dict)
    member: dict[Literal, int] = field(default_factory=dict)

    def add(self, conjunct: Conjunct, bit: int) -> None:
        kind = conjunct.literals[0][0]
        if conjunct.test == "unequal":
            self.unequal[conjunct.literals[0]] = self.unequal.get(conjunct.literals[0], 0) | bit
            return
        every, passing = (
            (self.equal_any, self.equal)
            if conjunct.test == "equal"
            else (self.member_any, self.member)
        )
        every[kind] = every.get(kind, 0) | bit
        for literal in conjunct.literals:
            passing[literal] = passing.get(literal, 0) | bit

    def rules(self) -> int:
        """Every rule this path can exclude."""
        masks = [*self.equal_any.values(), *self.unequal.values(), *self.member_any.values()]
        return functools.reduce(operator.or_, masks, 0)

    def excluded(self, literal: Literal) -> int:
        """The rules certainly false when the activation holds ``literal`` at this path."""
        differs = self.equal_any.get(literal[0], 0) & ~self.equal.get(literal, 0)
        return differs | self.unequal.get(literal, 0)

    def excluded_by_list(self, items: list[Any]) -> int:
        """The ``member`` rules certainly false when the activation holds the list ``items``:
        those whose literal it lacks, when every item is of the literal's CEL type."""
        if not items:
            return functools.reduce(operator.or_, self.member_any.values(), 0)
        kind = type(items[0])
        name = _KINDS.get(kind)
        if name is None or len(items) > _MAX_ITEMS:
            return 0
        passing = 0
        for item in items:
            if type(item) is not kind or (kind is int and not INT_MIN <= item < INT_END):
                return 0
            passing |= self.member.get((name, item), 0)
        return self.member_any.get(name, 0) & ~passing


class RuleIndex(Generic[Rule]):
    """A block's indexed paths, and the rules left to run for each set of skipped ones."""

    __slots__ = ("_plans", "paths", "rules")

    def __init__(self, rules: Sequence[Rule], sources: Sequence[str]) -> None:
        self.rules = tuple(rules)
        paths: dict[tuple[str, ...], PathIndex] = {}
        for position, source in enumerate(sources):
            for conjunct in conjuncts(source):
                path = (conjunct.root, *conjunct.keys)
                index = paths.setdefault(path, PathIndex(conjunct.root, conjunct.keys))
                index.add(conjunct, 1 << position)
        # Looking a path up costs about what running the cheapest rule does: a path only
        # one rule tests is not worth it.
        self.paths = tuple(p for p in paths.values() if p.rules().bit_count() >= _MIN_RULES)
        self._plans: dict[int, tuple[Rule, ...]] = {}

    def excluded(self, request: Mapping[str, Any], org: Mapping[str, Any]) -> int:
        """The rules (a bit mask of positions) ``request`` certainly does not match.

        ``request`` and ``org`` as ``engine.evaluate`` gets them: the activation holds
        ``{**request, "now": …, "org": dict(org)}``. Anything but plain dicts on the way
        and nothing is excluded.
        """
        if type(request) is not dict or type(org) is not dict:
            return 0
        excluded = 0
        for path in self.paths:
            value: Any = org if path.root == "org" else request.get(path.root)
            for key in path.keys:
                if type(value) is not dict:
                    value = None
                    break
                value = value.get(key)
            kind = type(value)
            if kind is str:
                excluded |= path.excluded(("string", value))
            elif kind is bool:
                excluded |= path.excluded(("bool", value))
            elif kind is int and INT_MIN <= value < INT_END:
                excluded |= path.excluded(("int", value))
            elif kind is list and path.member_any:
                excluded |= path.excluded_by_list(value)
        return excluded

    def runnable(self, excluded: int) -> tuple[Rule, ...]:
        """The rules, in order, without those in ``excluded``."""
        plan = self._plans.get(excluded)
        if plan is None:
            plan = tuple(r for i, r in enumerate(self.rules) if not excluded >> i & 1)
            if len(self._plans) < _MAX_PLANS:
                self._plans[excluded] = plan
        return plan
