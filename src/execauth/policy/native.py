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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from execauth.policy.cel_syntax import CelSyntaxError, Node, parse

# A condition's answer over the variables of one evaluation: ``None`` when CEL must decide.
NativeCondition = Callable[[Mapping[str, Any]], bool | None]
_Value = Callable[[Mapping[str, Any]], Any]

_UNKNOWN: Any = object()  # a value CEL would fail to produce, or one we do not model
_INT_MIN, _INT_END = -(2**63), 2**63
# RFC 3339 as both ``timestamp()`` and ``datetime.fromisoformat`` read it, to microseconds.
_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?(Z|[+-][0-9]{2}:[0-9]{2})"
)
_STRING_TESTS: dict[str, Callable[[str, str], bool]] = {
    "startsWith": str.startswith,
    "endsWith": str.endswith,
    "contains": str.__contains__,
}
# A timestamp's parts in UTC, as CEL numbers them: Sunday is day 0.
_TIME_PARTS: dict[str, Callable[[datetime], int]] = {
    "getDayOfWeek": lambda moment: (moment.weekday() + 1) % 7,
    "getHours": lambda moment: moment.hour,
}
_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda a, b: bool(a < b),
    "<=": lambda a, b: bool(a <= b),
    ">": lambda a, b: bool(a > b),
    ">=": lambda a, b: bool(a >= b),
}


class _NotNative(Exception):
    """A form this module leaves to CEL."""


class _Constant:
    """A literal's value, known when the condition compiles: the function that compares
    with it is specialized to its type (a call to ``kind`` a request saved)."""

    __slots__ = ("kind", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        self.kind = kind(value)

    def __call__(self, variables: Mapping[str, Any]) -> Any:
        return self.value


def native_condition(source: str) -> NativeCondition | None:
    """``source`` as a Python function, or ``None`` when some part of it is left to CEL.

    A source with a backslash is left whole: the analysis parser's reading of escapes is
    not held to the ``cel`` package's, and a literal read differently would decide
    differently.
    """
    if "\\" in source:
        return None
    try:
        return _condition(parse(source))
    except (CelSyntaxError, _NotNative):
        return None
    except RecursionError:  # a long && chain is a deep tree: compiling it recurses
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
        return "int" if _INT_MIN <= value < _INT_END else None
    if category is datetime:
        return "timestamp" if value.tzinfo is UTC else None
    return None


def _condition(node: Node) -> NativeCondition:
    """A node whose value is a boolean."""
    if node.kind == "binary" and node.name in {"&&", "||"}:
        left, right = (_condition(child) for child in node.children)
        return _junction(node.name == "||", left, right)
    if node.kind == "unary" and node.name == "!":
        return _not(_condition(node.children[0]))
    if node.kind == "binary" and node.name in {"==", "!="}:
        left, right = (_value(child) for child in node.children)
        if isinstance(left, _Constant) and not isinstance(right, _Constant):
            left, right = right, left  # equality is symmetric
        if isinstance(right, _Constant):
            return _equals_constant(node.name == "==", left, right)
        return _equality(node.name == "==", left, right)
    if node.kind == "binary" and node.name in _ORDER:
        return _ordering(_ORDER[node.name], *(_value(child) for child in node.children))
    if node.kind == "binary" and node.name == "in":
        return _membership(node.children[0], node.children[1])
    if node.kind == "call" and node.receiver and node.name in _STRING_TESTS:
        if len(node.children) != 2:
            raise _NotNative(node.name)
        test = _STRING_TESTS[node.name]
        text, affix = (_value(child) for child in node.children)
        if isinstance(affix, _Constant):
            if type(affix.value) is not str:
                raise _NotNative(node.name)  # the package has no such overload: an error
            return _string_test_constant(test, text, affix.value)
        return _string_test(test, text, affix)
    if node.kind == "macro" and node.name == "exists" and len(node.children) == 2:
        return _exists(_value(node.children[0]), str(node.value), _condition(node.children[1]))
    if node.kind == "has":
        return _has(node.children[0])
    if node.kind == "literal" and node.name == "bool":
        constant = bool(node.value)
        return lambda variables: constant
    if node.kind in {"ident", "select"}:
        return _boolean(_value(node))
    raise _NotNative(node.kind)


def _value(node: Node) -> _Value:
    """A node whose value is data: a literal, a variable, a field, a size."""
    if node.kind == "literal" and node.name in {"string", "bool", "int"}:
        constant = _Constant(node.value)
        if constant.kind is None:
            raise _NotNative("literal")
        return constant
    if node.kind in {"ident", "select"}:
        path = _path(node)
        if path is not None:
            return _variable(*path)
    if node.kind == "select":
        return _field(_value(node.children[0]), node.name)
    if node.kind == "index":
        container, key = node.children
        if key.kind != "literal" or key.name not in {"string", "int"}:
            raise _NotNative("index")
        return _element(_value(container), key.value)
    if node.kind == "call" and node.name == "timestamp" and not node.receiver:
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
        return _Constant(moment)
    if node.kind == "call" and node.name == "size" and len(node.children) == 1:
        return _size(_value(node.children[0]))
    if node.kind == "call" and node.receiver and node.name in _TIME_PARTS:
        if len(node.children) != 1:
            raise _NotNative(node.name)  # with a time zone: the package's to compute
        return _time_part(_TIME_PARTS[node.name], _value(node.children[0]))
    raise _NotNative(node.kind)


def _path(node: Node) -> tuple[str, tuple[str, ...]] | None:
    """``payload.image`` as (variable, fields), when the chain starts at a name."""
    fields: list[str] = []
    while node.kind == "select":
        fields.append(node.name)
        node = node.children[0]
    if node.kind != "ident":
        return None
    return node.name, tuple(reversed(fields))


def _variable(name: str, fields: tuple[str, ...]) -> _Value:
    """A variable, or a field path into it, read with one call (most conditions read
    one or two levels: those get a function of their own)."""
    if not fields:
        return lambda variables: variables.get(name, _UNKNOWN)
    if len(fields) == 1:
        (only,) = fields

        def one_level(variables: Mapping[str, Any]) -> Any:
            container = variables.get(name)
            return container.get(only, _UNKNOWN) if type(container) is dict else _UNKNOWN

        return one_level

    def walk(variables: Mapping[str, Any]) -> Any:
        value = variables.get(name, _UNKNOWN)
        for key in fields:
            if type(value) is not dict:
                return _UNKNOWN
            value = value.get(key, _UNKNOWN)
        return value

    return walk


def _field(parent: _Value, name: str) -> _Value:
    def select(variables: Mapping[str, Any]) -> Any:
        container = parent(variables)
        if type(container) is dict:
            return container.get(name, _UNKNOWN)
        return _UNKNOWN

    return select


def _element(container: _Value, key: object) -> _Value:
    """``xs[0]`` of a list, ``m["k"]`` of a map; out of range, absent or of another type:
    the package fails, so the value is unknown."""
    if type(key) is int:
        position = key

        def item(variables: Mapping[str, Any]) -> Any:
            values = container(variables)
            if type(values) is list and 0 <= position < len(values):
                return values[position]
            return _UNKNOWN

        return item
    return _field(container, str(key))


def _has(selection: Node) -> NativeCondition:
    """``has(m.f)``: whether a map holds the key; of anything else, the package's to say."""
    parent = _value(selection.children[0])
    name = selection.name

    def present(variables: Mapping[str, Any]) -> bool | None:
        container = parent(variables)
        return name in container if type(container) is dict else None

    return present


def _time_part(part: Callable[[datetime], int], operand: _Value) -> _Value:
    def read(variables: Mapping[str, Any]) -> Any:
        moment = operand(variables)
        return part(moment) if kind(moment) == "timestamp" else _UNKNOWN

    return read


def _size(operand: _Value) -> _Value:
    def size(variables: Mapping[str, Any]) -> Any:
        value = operand(variables)
        category = type(value)
        if category is list or category is dict:
            return len(value)
        if category is str and value.isascii():  # the cel package counts a string's bytes
            return len(value)
        return _UNKNOWN

    return size


def _junction(decisive: bool, left: NativeCondition, right: NativeCondition) -> NativeCondition:
    """``&&`` (``decisive`` False) or ``||`` (True). CEL's ``&&`` is false when either side
    is false, whatever the other (an error included), and true only when both are true;
    ``||`` the same with true and false exchanged."""

    def join(variables: Mapping[str, Any]) -> bool | None:
        first = left(variables)
        if first is decisive:
            return decisive
        second = right(variables)
        if second is decisive:
            return decisive
        return None if first is None or second is None else not decisive

    return join


def _not(operand: NativeCondition) -> NativeCondition:
    def negated(variables: Mapping[str, Any]) -> bool | None:
        value = operand(variables)
        return None if value is None else not value

    return negated


def _boolean(operand: _Value) -> NativeCondition:
    def read(variables: Mapping[str, Any]) -> bool | None:
        value = operand(variables)
        return value if type(value) is bool else None

    return read


def _equality(equal: bool, left: _Value, right: _Value) -> NativeCondition:
    def compare(variables: Mapping[str, Any]) -> bool | None:
        a, b = left(variables), right(variables)
        category = kind(a)
        if category is None or category != kind(b):
            return None  # CEL compares across types (1 == 1.0); left to it
        return (a == b) is equal

    return compare


def _equals_constant(equal: bool, operand: _Value, constant: _Constant) -> NativeCondition:
    """``operand == constant``: only a value of the constant's own type is compared."""
    value, category = constant.value, constant.kind
    if category != "string" and category != "bool":
        return _equality(equal, operand, constant)  # an int's range, a timestamp's zone
    expected: type = str if category == "string" else bool

    def same_type(variables: Mapping[str, Any]) -> bool | None:
        found = operand(variables)
        if type(found) is expected:
            return (found == value) is equal
        return None

    return same_type


def _ordering(order: Callable[[Any, Any], bool], left: _Value, right: _Value) -> NativeCondition:
    def compare(variables: Mapping[str, Any]) -> bool | None:
        a, b = left(variables), right(variables)
        category = kind(a)
        if category is None or category == "bool" or category != kind(b):
            return None
        return order(a, b)

    return compare


def _membership(element_node: Node, container_node: Node) -> NativeCondition:
    element = _value(element_node)
    if container_node.kind == "list":
        items = [_value(item) for item in container_node.children]
        if not all(item_node.kind == "literal" for item_node in container_node.children):
            raise _NotNative("list")
        constants = [item({}) for item in items]
        if constants and all(type(c) is str for c in constants):
            return _in_strings(element, frozenset(constants))
        return _in_items(element, lambda variables: constants)
    return _in_items(element, _value(container_node))


def _in_strings(element: _Value, strings: frozenset[str]) -> NativeCondition:
    """``x in ["EUR", "USD"]``: a string is looked up; anything else is CEL's to compare."""

    def member(variables: Mapping[str, Any]) -> bool | None:
        value = element(variables)
        return value in strings if type(value) is str else None

    return member


def _in_items(element: _Value, container: _Value) -> NativeCondition:
    def member(variables: Mapping[str, Any]) -> bool | None:
        value, items = element(variables), container(variables)
        category = kind(value)
        if category is None:
            return None
        if type(items) is dict:
            # A map's keys are strings in a JSON request; another key type is left to CEL.
            return value in items if category == "string" else None
        if type(items) is list and all(kind(item) == category for item in items):
            return value in items
        return None

    return member


def _string_test(test: Callable[[str, str], bool], left: _Value, right: _Value) -> NativeCondition:
    def run(variables: Mapping[str, Any]) -> bool | None:
        text, affix = left(variables), right(variables)
        if type(text) is str and type(affix) is str:
            return test(text, affix)
        return None

    return run


def _string_test_constant(
    test: Callable[[str, str], bool], operand: _Value, affix: str
) -> NativeCondition:
    def run(variables: Mapping[str, Any]) -> bool | None:
        text = operand(variables)
        return test(text, affix) if type(text) is str else None

    return run


def _exists(items: _Value, name: str, predicate: NativeCondition) -> NativeCondition:
    # The cel package runs the predicate element by element and stops at the first true
    # or the first error: an undecided element before any true one leaves it to CEL.
    def any_element(variables: Mapping[str, Any]) -> bool | None:
        values = items(variables)
        if type(values) is not list:
            return None
        scope = dict(variables)
        for value in values:
            scope[name] = value
            answer = predicate(scope)
            if answer is not False:
                return answer
        return False

    return any_element
