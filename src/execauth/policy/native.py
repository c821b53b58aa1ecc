"""The common forms of a condition, decided in Python; CEL stays the authority.

Converting a request into CEL values is the largest fixed cost of an evaluation: the
``cel`` package tries other types before it takes a string (docs/performance.md, "The
conversion round"). Most conditions in real policies are comparisons of a request's
fields with literals, joined by ``&&``, ``||`` and ``!``. ``native_condition`` compiles
such a condition into a Python function over the plain request that answers ``True`` or
``False`` only where it is certain that the ``cel`` package answers the same, and
``None`` (undecided) anywhere else: a missing key, a value of another type than its
literal's, a number CEL would compare across types, a non-ASCII string whose size CEL
counts in bytes. An undecided rule sends the whole evaluation back to CEL
(``engine.evaluate``), so a native condition can only ever repeat CEL's answer, never
make one of its own; the property tests hold every form to the ``cel`` package.

What compiles: literals (strings without escapes, ``int``, ``bool``, ``timestamp`` of a
literal), variables and field selections, ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``,
``in`` (a list literal, a list, a map's keys), ``&&``, ``||``, ``!``, ``has``, an index
by a literal, ``startsWith``, ``endsWith``, ``contains``, ``size``, ``exists``, and a
timestamp's ``getDayOfWeek()`` and ``getHours()`` in UTC.
Anything else leaves the rule to CEL (``native_condition`` returns ``None``). Pure.

How: the condition's tree is written out as the source of one Python function, compiled
once with the policy. A rule is then one call, where a function per node of its tree
(closures over closures) cost a call per node: the 21 rules the benchmark's block runs
take 7.5 µs against 10.3 (docs/performance.md, "The fixed-cost round"). No text of the
policy reaches the generated source: literals, variable and field names are passed to it
as values under names of our own (``_Source.constant``), so the source only ever holds
this module's words.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from execauth.policy.cel_ranges import INT_END, INT_MIN
from execauth.policy.cel_syntax import CelSyntaxError, Node, parse

# A condition's answer over the variables of one evaluation: ``None`` when CEL must decide.
NativeCondition = Callable[[Mapping[str, Any]], bool | None]

_UNKNOWN: Any = object()  # a value CEL would fail to produce, or one we do not model
# RFC 3339 as both ``timestamp()`` and ``datetime.fromisoformat`` read it, to microseconds.
_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?(Z|[+-][0-9]{2}:[0-9]{2})"
)
# receiver.method(argument) as Python writes the same test, for strings.
_STRING_TESTS = {
    "startsWith": "{text}.startswith({affix})",
    "endsWith": "{text}.endswith({affix})",
    "contains": "({affix} in {text})",
}
# A timestamp's parts in UTC, as CEL numbers them: Sunday is day 0.
_TIME_PARTS = {
    "getDayOfWeek": "({moment}.weekday() + 1) % 7",
    "getHours": "{moment}.hour",
}
# The comparisons, each with the one that answers the same with its sides exchanged.
_MIRRORED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
# The test that a value is of a CEL type, as the generated code writes it.
_OF_KIND = {
    "string": "type({0}) is str",
    "bool": "type({0}) is bool",
    "int": "type({0}) is int and INT_MIN <= {0} < INT_END",
    "timestamp": "type({0}) is datetime and {0}.tzinfo is UTC",
}
# Python allows 100 levels of indentation; a deeper condition is left to CEL.
_MAX_DEPTH = 90


class _NotNative(Exception):
    """A form this module leaves to CEL."""


def native_condition(source: str) -> NativeCondition | None:
    """``source`` as a Python function, or ``None`` when some part of it is left to CEL.

    A source with a backslash is left whole: the analysis parser's reading of escapes is
    not held to the ``cel`` package's, and a literal read differently would decide
    differently.
    """
    if "\\" in source:
        return None
    try:
        return _Source.of(parse(source))
    except (CelSyntaxError, _NotNative):
        return None
    except RecursionError:  # a long && chain is a deep tree: compiling it recurses
        return None
    except SyntaxError:  # past Python's limits (20 nested loops: exists in exists in ...)
        return None


def kind(value: Any) -> str | None:
    """The CEL type a native comparison accepts ``value`` as, if any.

    ``bool`` before ``int`` (Python's ``True == 1``; CEL's ``true != 1``); an ``int``
    only within CEL's ``int`` range (beyond it the ``cel`` package makes a ``uint``); a
    timestamp only in UTC (a naive ``datetime`` is read in local time).
    """
    category = type(value)
    if category is str:
        return "string"
    if category is bool:
        return "bool"
    if category is int:
        return "int" if INT_MIN <= value < INT_END else None
    if category is datetime:
        return "timestamp" if value.tzinfo is UTC else None
    return None


def _member(value: Any, items: Any) -> bool | None:
    """``value in items`` for a list or a map's keys, when CEL certainly agrees."""
    category = kind(value)
    if category is None:
        return None
    if type(items) is dict:
        # A map's keys are strings in a JSON request; another key type is left to CEL.
        return value in items if category == "string" else None
    if type(items) is list and all(kind(item) == category for item in items):
        return value in items
    return None


@dataclass(frozen=True, slots=True)
class _Written:
    """A value the generated code holds: the Python name it is under, and the literal's
    CEL type when it is a literal (known when the condition compiles)."""

    name: str
    literal: str | None = None


class _Source:
    """The generated function of one condition, written line by line.

    Each ``_condition`` writes the lines that compute a node into a new local and returns
    its name; a junction's right side is written inside the ``else`` of its left, which
    keeps CEL's order of evaluation and its short circuit.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {
            "U": _UNKNOWN,
            "INT_MIN": INT_MIN,
            "INT_END": INT_END,
            "UTC": UTC,
            "datetime": datetime,
            "kind": kind,
            "member": _member,
        }
        self._locals = 0

    @classmethod
    def of(cls, tree: Node) -> NativeCondition:
        source = cls()
        answer = source._condition(tree, 1, {})
        source.line(1, f"return {answer}")
        text = "def condition(v):\n" + "\n".join(source.lines) + "\n"
        namespace = dict(source.names)
        # The text holds only this module's words (every literal and name of the policy
        # is a value in ``namespace``): compiling it runs nothing of the policy's.
        exec(compile(text, "<native condition>", "exec"), namespace)  # noqa: S102
        condition: NativeCondition = namespace["condition"]
        return condition

    def line(self, depth: int, text: str) -> None:
        if depth > _MAX_DEPTH:
            raise _NotNative("nesting")
        self.lines.append("    " * depth + text)

    def local(self) -> str:
        self._locals += 1
        return f"t{self._locals}"

    def constant(self, value: Any) -> str:
        name = f"k{len(self.names)}"
        self.names[name] = value
        return name

    def _computed(self, depth: int, expression: str) -> str:
        name = self.local()
        self.line(depth, f"{name} = {expression}")
        return name

    # --- conditions: each writes a local that holds True, False or None (undecided) ---
    def _condition(self, node: Node, depth: int, scope: dict[str, str]) -> str:
        """A node whose value is a boolean."""
        if node.kind == "binary" and node.name in {"&&", "||"}:
            return self._junction(node.name == "||", node, depth, scope)
        if node.kind == "unary" and node.name == "!":
            operand = self._condition(node.children[0], depth, scope)
            return self._computed(depth, f"None if {operand} is None else not {operand}")
        if node.kind == "binary" and node.name in _MIRRORED:
            left, right = (self._value(child, depth, scope) for child in node.children)
            return self._comparison(node.name, left, right, depth)
        if node.kind == "binary" and node.name == "in":
            return self._membership(node.children[0], node.children[1], depth, scope)
        if node.kind == "call" and node.receiver and node.name in _STRING_TESTS:
            return self._string_test(node, depth, scope)
        if node.kind == "macro" and node.name == "exists" and len(node.children) == 2:
            return self._exists(node, depth, scope)
        if node.kind == "has":
            # has(m.f): whether a map holds the key; of anything else, the package's to say.
            selection = node.children[0]
            parent = self._value(selection.children[0], depth, scope).name
            key = self.constant(selection.name)
            return self._computed(depth, f"({key} in {parent}) if type({parent}) is dict else None")
        if node.kind == "literal" and node.name == "bool":
            return self._computed(depth, repr(bool(node.value)))
        if node.kind in {"ident", "select"}:
            value = self._value(node, depth, scope).name
            return self._computed(depth, f"{value} if type({value}) is bool else None")
        raise _NotNative(node.kind)

    def _junction(self, decisive: bool, node: Node, depth: int, scope: dict[str, str]) -> str:
        """``&&`` (``decisive`` False) or ``||`` (True). CEL's ``&&`` is false when either
        side is false, whatever the other (an error included), and true only when both are
        true; ``||`` the same with true and false exchanged."""
        answer = self.local()
        left = self._condition(node.children[0], depth, scope)
        self.line(depth, f"if {left} is {decisive}:")
        self.line(depth + 1, f"{answer} = {decisive}")
        self.line(depth, "else:")
        right = self._condition(node.children[1], depth + 1, scope)
        self.line(depth + 1, f"if {right} is {decisive}:")
        self.line(depth + 2, f"{answer} = {decisive}")
        self.line(depth + 1, f"elif {left} is None or {right} is None:")
        self.line(depth + 2, f"{answer} = None")
        self.line(depth + 1, "else:")
        self.line(depth + 2, f"{answer} = {not decisive}")
        return answer

    def _comparison(self, operator: str, left: _Written, right: _Written, depth: int) -> str:
        """``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=`` between values of one CEL type only:
        CEL compares numbers across types (``1 == 1.0``), which is left to it, and it
        orders no booleans (left to it too)."""
        ordering = operator not in {"==", "!="}
        if left.literal is not None and right.literal is None:
            left, right, operator = right, left, _MIRRORED[operator]  # 1 < x is x > 1
        if right.literal is not None:
            if ordering and right.literal == "bool":
                raise _NotNative("ordering of booleans")
            test = _OF_KIND[right.literal].format(left.name)
            return self._computed(
                depth, f"({left.name} {operator} {right.name}) if {test} else None"
            )
        category = self._computed(depth, f"kind({left.name})")
        unordered = f"or {category} == 'bool' " if ordering else ""
        return self._computed(
            depth,
            f"None if {category} is None {unordered}or {category} != kind({right.name}) "
            f"else ({left.name} {operator} {right.name})",
        )

    def _membership(
        self, element_node: Node, container_node: Node, depth: int, scope: dict[str, str]
    ) -> str:
        element = self._value(element_node, depth, scope).name
        if container_node.kind == "list":
            if not all(item.kind == "literal" for item in container_node.children):
                raise _NotNative("list")
            items = [self._literal(item) for item in container_node.children]
            if items and all(type(item) is str for item in items):
                # x in ["EUR", "USD"]: a string is looked up; anything else is CEL's.
                strings = self.constant(frozenset(items))
                return self._computed(
                    depth, f"({element} in {strings}) if type({element}) is str else None"
                )
            return self._computed(depth, f"member({element}, {self.constant(items)})")
        container = self._value(container_node, depth, scope).name
        return self._computed(depth, f"member({element}, {container})")

    def _string_test(self, node: Node, depth: int, scope: dict[str, str]) -> str:
        if len(node.children) != 2:
            raise _NotNative(node.name)
        text, affix = (self._value(child, depth, scope) for child in node.children)
        test = _STRING_TESTS[node.name].format(text=text.name, affix=affix.name)
        if affix.literal is not None:
            if affix.literal != "string":
                raise _NotNative(node.name)  # the package has no such overload: an error
            return self._computed(depth, f"{test} if type({text.name}) is str else None")
        return self._computed(
            depth, f"{test} if type({text.name}) is str and type({affix.name}) is str else None"
        )

    def _exists(self, node: Node, depth: int, scope: dict[str, str]) -> str:
        """The cel package runs the predicate element by element and stops at the first
        true or the first error: an undecided element before any true one leaves it to
        CEL."""
        items = self._value(node.children[0], depth, scope).name
        answer, element = self.local(), self.local()
        self.line(depth, f"if type({items}) is not list:")
        self.line(depth + 1, f"{answer} = None")
        self.line(depth, "else:")
        self.line(depth + 1, f"{answer} = False")
        self.line(depth + 1, f"for {element} in {items}:")
        inner = {**scope, str(node.value): element}
        found = self._condition(node.children[1], depth + 2, inner)
        self.line(depth + 2, f"if {found} is not False:")
        self.line(depth + 3, f"{answer} = {found}")
        self.line(depth + 3, "break")
        return answer

    # --- values: each writes a local that holds the value, or U (unknown) ---
    def _value(self, node: Node, depth: int, scope: dict[str, str]) -> _Written:
        """A node whose value is data: a literal, a variable, a field, a size."""
        if node.kind == "literal" and node.name in {"string", "bool", "int"}:
            value = self._literal(node)
            category = kind(value)
            return _Written(self.constant(value), category)
        if node.kind == "ident":
            bound = scope.get(node.name)  # an exists macro's element
            if bound is not None:
                return _Written(bound)
            return _Written(self._computed(depth, f"v.get({self.constant(node.name)}, U)"))
        if node.kind == "select":
            parent = self._value(node.children[0], depth, scope).name
            field = self.constant(node.name)
            return _Written(
                self._computed(depth, f"{parent}.get({field}, U) if type({parent}) is dict else U")
            )
        if node.kind == "index":
            container_node, key = node.children
            if key.kind != "literal" or key.name not in {"string", "int"}:
                raise _NotNative("index")
            container = self._value(container_node, depth, scope).name
            if type(key.value) is not int:
                name = self.constant(str(key.value))
                return _Written(
                    self._computed(
                        depth, f"{container}.get({name}, U) if type({container}) is dict else U"
                    )
                )
            # Out of range, absent or of another type: the package fails; unknown.
            position = self.constant(key.value)
            return _Written(
                self._computed(
                    depth,
                    f"{container}[{position}] if type({container}) is list "
                    f"and 0 <= {position} < len({container}) else U",
                )
            )
        if node.kind == "call" and node.name == "timestamp" and not node.receiver:
            return _Written(self.constant(self._timestamp(node)), "timestamp")
        if node.kind == "call" and node.name == "size" and len(node.children) == 1:
            operand = self._value(node.children[0], depth, scope).name
            # The cel package counts a string's bytes: only an ASCII string's are its length.
            return _Written(
                self._computed(
                    depth,
                    f"len({operand}) if type({operand}) is list or type({operand}) is dict "
                    f"or (type({operand}) is str and {operand}.isascii()) else U",
                )
            )
        if node.kind == "call" and node.receiver and node.name in _TIME_PARTS:
            if len(node.children) != 1:
                raise _NotNative(node.name)  # with a time zone: the package's to compute
            operand = self._value(node.children[0], depth, scope).name
            part = _TIME_PARTS[node.name].format(moment=operand)
            test = _OF_KIND["timestamp"].format(operand)
            return _Written(self._computed(depth, f"{part} if {test} else U"))
        raise _NotNative(node.kind)

    @staticmethod
    def _literal(node: Node) -> Any:
        """A string, bool or int literal's value, when a native comparison takes it."""
        if node.name not in {"string", "bool", "int"} or kind(node.value) is None:
            raise _NotNative("literal")
        return node.value

    @staticmethod
    def _timestamp(node: Node) -> datetime:
        argument = node.children[0] if len(node.children) == 1 else None
        if argument is None or argument.kind != "literal" or argument.name != "string":
            raise _NotNative("timestamp")
        text = str(argument.value)
        if not _TIMESTAMP.fullmatch(text):
            raise _NotNative("timestamp")
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
        except (ValueError, OverflowError) as exc:  # 25:00, a 13th month, year 0 in UTC
            raise _NotNative("timestamp") from exc
        return moment
