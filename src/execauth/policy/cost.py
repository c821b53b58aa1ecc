"""Bounded evaluation: what a CEL condition may cost, estimated before it runs.

The ``cel`` evaluator is Rust code that holds the GIL, so a slow expression cannot be
interrupted by a Python timer: it must be refused before it starts. Two facts drive
the estimate (measured, see docs/policy-language.md "Bounded evaluation"):

* comprehension macros (``all``, ``exists``, ``exists_one``, ``map``, ``filter``) nest
  polynomially: a body ``d`` macros deep runs up to ``n^d`` times, and a body that
  itself scans a collection (``x in list``) costs ``n`` more, hence ``n^(d+1)``;
* ``map`` and ``filter`` copy their growing result list on every step, so they are
  quadratic in their receiver and proportional to the size of each element copied
  (``xs.map(x, payload.m)`` over 300 items with a 1,000-entry map took 28 s).
  A rule using them is charged ``n^(d+1) × T``, ``T`` being the request's total
  number of list elements and map entries.

Publishing refuses expressions longer than ``MAX_EXPRESSION_LENGTH`` characters or
nested deeper than ``MAX_MACRO_DEPTH``; evaluation refuses (SILENCE) a rule whose
estimate exceeds ``MAX_EVALUATION_COST``. Strings count for nothing: string functions
are linear and a request body is at most 64 KiB. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_EXPRESSION_LENGTH = 2048
MAX_MACRO_DEPTH = 2
MAX_EVALUATION_COST = 1_000_000
BODY_TERMS_FREE = 4

MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
COPYING_MACROS = frozenset({"map", "filter"})
# The timestamp accessors; their time-zone form (``now.getHours("Europe/Paris")``) is
# not implemented by the ``cel`` package: it compiles, then fails at every evaluation.
TIMESTAMP_ACCESSORS = frozenset(
    {
        "getFullYear", "getMonth", "getDayOfYear", "getDayOfMonth", "getDate", "getDayOfWeek",
        "getHours", "getMinutes", "getSeconds", "getMilliseconds",
    }
)  # fmt: skip

_STRING_PREFIXES = frozenset({"r", "b", "rb", "br"})


@dataclass(frozen=True, slots=True)
class ExpressionShape:
    """What the scanner learned about one expression's source text."""

    depth: int  # deepest nesting of comprehension macros (0: none)
    copies: bool  # uses map or filter
    largest_literal: int  # most elements in one list or map literal
    calls_with_arguments: tuple[str, ...]  # names of calls given at least one argument
    body_terms: int = 0  # variable references inside comprehension bodies


@dataclass(frozen=True, slots=True)
class InputSize:
    """The size of an evaluation input: computed once per request, used for every rule."""

    largest: int  # the most elements of any one list or map, anywhere
    total: int  # list elements plus map entries, over the whole input


@dataclass(slots=True)
class _Frame:
    closer: str
    macro: str | None  # the comprehension macro this parenthesis called, if any
    call: str | None  # the function or method this parenthesis called, if any
    commas: int = 0
    empty: bool = True


def scan_expression(source: str) -> ExpressionShape:
    """Scan CEL source (skipping strings and comments) for macro nesting, literals and calls.

    A lexical scan, not a parse: it runs on source that already compiled, so brackets
    balance. ``x.all(v, p)`` opens a macro frame; the depth of a frame is the number of
    macro frames enclosing it plus one.
    """
    stack: list[_Frame] = []
    depth = 0
    copies = False
    largest_literal = 0
    calls: list[str] = []
    body_terms = 0
    counted = False  # whether the last token was counted as a body term
    previous: list[str] = []  # the last two significant tokens
    i, end = 0, len(source)

    def significant(token: str) -> None:
        if stack:
            stack[-1].empty = False
        previous.append(token)
        del previous[:-2]

    while i < end:
        char = source[i]
        if char.isspace():
            i += 1
            continue
        if source.startswith("//", i):  # a comment runs to the end of the line
            newline = source.find("\n", i)
            i = end if newline < 0 else newline + 1
            continue
        if char.isalpha() or char == "_":
            start = i
            while i < end and (source[i].isalnum() or source[i] == "_"):
                i += 1
            word = source[start:i]
            if i < end and source[i] in "'\"" and word.lower() in _STRING_PREFIXES:
                i = _skip_string(source, i, raw="r" in word.lower())
                significant('"')
            else:
                in_body = any(f.macro is not None for f in stack)
                declaring = bool(stack) and stack[-1].macro is not None and stack[-1].empty
                field = bool(previous) and previous[-1] == "."
                counted = in_body and not declaring and not field and _is_identifier(word)
                body_terms += counted
                significant(word)
                continue
        after_counted, counted = counted, False
        if char in "'\"":
            i = _skip_string(source, i, raw=False)
            significant('"')
            continue
        if char in "([{":
            macro = call = None
            if char == "(" and previous and _is_identifier(previous[-1]):
                call = previous[-1]
                body_terms -= after_counted  # a function name, not a variable
                receiver_style = len(previous) == 2 and previous[0] == "."
                if receiver_style and call in MACROS:
                    macro = call
            significant(char)
            frame = _Frame({"(": ")", "[": "]", "{": "}"}[char], macro, call)
            if macro is not None:
                depth = max(depth, 1 + sum(f.macro is not None for f in stack))
                copies = copies or macro in COPYING_MACROS
            stack.append(frame)
            i += 1
            continue
        if char in ")]}":
            if stack:
                frame = stack.pop()
                if frame.call is not None and not frame.empty:
                    calls.append(frame.call)
                if frame.closer in "]}" and not frame.empty:
                    largest_literal = max(largest_literal, frame.commas + 1)
            significant(char)
            i += 1
            continue
        if char == "," and stack:
            stack[-1].commas += 1
        significant(char)
        i += 1
    return ExpressionShape(depth, copies, largest_literal, tuple(calls), body_terms)


def _is_identifier(token: str) -> bool:
    return (token[0].isalpha() or token[0] == "_") and token not in {"in", "true", "false", "null"}


def _skip_string(source: str, start: int, *, raw: bool) -> int:
    """The index just past the string literal whose opening quote is at ``start``."""
    quote = source[start]
    delimiter = quote * 3 if source.startswith(quote * 3, start) else quote
    i = start + len(delimiter)
    while i < len(source):
        if not raw and source[i] == "\\":
            i += 2
            continue
        if source.startswith(delimiter, i):
            return i + len(delimiter)
        i += 1
    return len(source)


def publish_problems(source: str, shape: ExpressionShape) -> list[str]:
    """Why an expression must be refused at publish time (empty when it may be published)."""
    problems: list[str] = []
    if len(source) > MAX_EXPRESSION_LENGTH:
        problems.append(f"expression exceeds {MAX_EXPRESSION_LENGTH} characters")
    if shape.depth > MAX_MACRO_DEPTH:
        problems.append(
            f"comprehension macros (all, exists, exists_one, map, filter) are nested "
            f"{shape.depth} deep; at most {MAX_MACRO_DEPTH} is allowed (evaluation cost grows "
            "as the list size to the power of the depth)"
        )
    elif estimated_cost(shape, InputSize(0, 0)) > MAX_EVALUATION_COST:
        problems.append(
            "the expression exceeds the evaluation cost limit even for an empty request "
            f"(its literals and terms inside {shape.depth}-deep comprehensions)"
        )
    zoned = sorted({name for name in shape.calls_with_arguments if name in TIMESTAMP_ACCESSORS})
    if zoned:
        problems.append(
            f"{', '.join(zoned)} with an argument is not supported by the CEL evaluator and "
            "would fail at every evaluation (time zones are not implemented): timestamps are "
            "UTC; call it as a method without arguments, e.g. now.getHours(), or shift by a "
            'fixed offset: (now + duration("1h")).getHours()'
        )
    return problems


def measure_input(value: Any) -> InputSize:
    """The largest collection and the total element count of ``value`` (iteratively)."""
    largest = total = 0
    pending: list[Any] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, Mapping):
            size = len(item)
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            size = len(item)
            pending.extend(item)
        else:
            continue
        largest = max(largest, size)
        total += size
    return InputSize(largest, total)


def estimated_cost(shape: ExpressionShape, size: InputSize) -> int:
    """An upper estimate, in evaluation steps, of running ``shape`` over an input of ``size``.

    Zero for an expression without comprehensions: its cost is linear in the input.
    """
    if shape.depth == 0:
        return 0
    n = max(size.largest, shape.largest_literal)
    cost = n ** (shape.depth + 1)
    if shape.copies:
        cost *= max(size.total, shape.largest_literal, 1)
    # A body written as many terms (``x in (l + l + … + l)``) multiplies its own work, and
    # chains of ``+`` copy quadratically: charge bodies past four terms quadratically.
    cost *= max(1, shape.body_terms // BODY_TERMS_FREE) ** 2
    return int(cost)


def within_budget(shape: ExpressionShape, size: InputSize) -> bool:
    return estimated_cost(shape, size) <= MAX_EVALUATION_COST
