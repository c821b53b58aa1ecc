"""What compiling a regular expression costs: the ``cel`` package compiles on every call.

``s.matches(p)`` builds a fresh automaton for ``p`` each time it runs (measured with
``cel`` 0.10: no cache), so a pattern's compile cost is paid once per call, in every
evaluation and in every comprehension step. Compile cost grows with the automaton's
size, which this estimates from the pattern text (Rust ``regex`` syntax), in the
evaluation steps of ``policy.cost``. ``x{m,n}`` copies ``x`` ``n`` times.

The weights are measured as ratios, timed beside a non-regex rule of known steps in the
same process (so machine load cancels; docs/policy-language.md, "Bounded evaluation"),
both alone (one compile per call) and repeated to the largest count the model admits:
a Unicode class such as ``\\w`` or ``\\pL`` costs up to 28,000 steps alone and
15,000–33,000 per copy; ``.``, ``\\s`` or a negated class about 2,000–2,500 alone
(550 a copy); an ASCII class about 560 alone, ``REGEX_BASE`` included (15 a copy); a
literal character 6; an alternative ``|`` up to 90; case-insensitive matching
(``(?i)``) loads case-folding tables once (up to 4,000) and turns letters into classes
(up to 70 a copy: ``k`` also matches the Kelvin sign). Each weight is the larger
figure, with some margin.

A pattern that is not a literal of the policy cannot be bounded by its length:
``(\\pL|\\w|\\d){500}`` is 16 characters and compiles for over 100 ms before
``regex`` gives up at its 10 MiB size limit. Its compile cost is ``REGEX_NOT_LITERAL``,
more than the whole evaluation limit: publishing refuses it, and a stored policy using
one is SILENCE. Pure.
"""

from __future__ import annotations

import re

REGEX_BASE = 500  # any compile, however small: about 20 µs
REGEX_LITERAL = 6
REGEX_FOLDED_LITERAL = 80  # a letter under (?i): a small class, sometimes non-ASCII (k, K)
REGEX_ASCII_CLASS = 15
REGEX_ANY = 2_500  # ``.``, a negated class: any character but a few, as UTF-8 ranges
REGEX_UNICODE_CLASS = 36_000  # \w \W \d \D \p{…} \P{…}: hundreds of UTF-8 ranges
REGEX_CASE_FOLDING = 4_000  # once per pattern with (?i): Unicode case-folding tables
REGEX_ALTERNATION = 100  # each ``|``: another branch of the automaton
REGEX_SCAN_CHARS_PER_STEP = 8  # matching: about 5 ns per character at worst (\b)
# A pattern computed at evaluation (e.g. read from the request): no bound from its text.
REGEX_NOT_LITERAL = 10**12

_UNICODE_ESCAPES = frozenset("wWdDpP")
_FLAGS = re.compile(r"\(\?[a-zA-Z-]*\)")
_CASE_INSENSITIVE = re.compile(r"\(\?[a-zA-Z]*i")


def regex_compile_steps(pattern: str) -> int:
    """Estimated steps to compile ``pattern``: the sum of its atoms, repetition multiplied."""
    # Any (?i) anywhere counts for the whole pattern: an over-estimate at worst.
    literal = REGEX_FOLDED_LITERAL if _CASE_INSENSITIVE.search(pattern) else REGEX_LITERAL
    ascii_class = REGEX_ASCII_CLASS + (literal if literal == REGEX_FOLDED_LITERAL else 0)
    totals = [0.0]  # the running total of each open group, innermost last
    last = 0.0  # the weight of the atom a quantifier would apply to
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i, last = _escape(pattern, i + 1, literal)
            totals[-1] += last
            continue
        if char == "[":
            i, last = _class(pattern, i + 1, ascii_class)
            totals[-1] += last
            continue
        if char == "(":
            if flags := _FLAGS.match(pattern, i):
                i, last = flags.end(), 0.0  # flags only, e.g. (?i): no atom
                continue
            totals.append(0.0)
            i, last = i + 1, 0.0
            continue
        if char == ")" and len(totals) > 1:
            last = totals.pop()
            totals[-1] += last
            i += 1
            continue
        if char == "{" and (counted := _repetition(pattern, i + 1)) is not None:
            i, copies = counted
            totals[-1] += last * (copies - 1)
            last *= copies
            continue
        if char in "*+?|^$":
            last = 0.0 if char in "|^$" else last
            totals[-1] += REGEX_ALTERNATION if char == "|" else 0.0
            i += 1
            continue
        last = REGEX_ANY if char == "." else literal
        totals[-1] += last
        i += 1
    folding = REGEX_CASE_FOLDING if literal == REGEX_FOLDED_LITERAL else 0
    return REGEX_BASE + folding + int(sum(totals))


def _escape(pattern: str, i: int, literal: float) -> tuple[int, float]:
    """(index past the escape, its weight) for the escape whose letter is at ``i``."""
    char = pattern[i : i + 1]
    if char in _UNICODE_ESCAPES and char:
        if char in "pP" and pattern.startswith("{", i + 1):
            end = pattern.find("}", i)
            return (len(pattern) if end < 0 else end + 1), REGEX_UNICODE_CLASS
        return i + (2 if char in "pP" else 1), REGEX_UNICODE_CLASS
    if char in ("s", "S"):
        return i + 1, REGEX_ANY
    if char == "x" and pattern.startswith("{", i + 1):
        end = pattern.find("}", i)
        return (len(pattern) if end < 0 else end + 1), literal
    return i + (3 if char == "x" else 1), literal


def _class(pattern: str, i: int, ascii_class: float) -> tuple[int, float]:
    """(index past the bracketed class opened before ``i``, its weight)."""
    negated = pattern.startswith("^", i)
    depth, start = 1, i
    unicode = False
    if pattern.startswith("]", i + negated):  # a leading ] is a literal member
        i += 1 + negated
    while i < len(pattern) and depth:
        char = pattern[i]
        if char == "\\":
            unicode = unicode or pattern[i + 1 : i + 2] in _UNICODE_ESCAPES
            i += 2
            continue
        if pattern.startswith("[:", i):
            unicode = True  # ASCII classes by name, but count them as large: rarely used
        depth += {"[": 1, "]": -1}.get(char, 0)
        i += 1
    if unicode:
        return i, REGEX_UNICODE_CLASS
    if negated:
        return i, REGEX_ANY
    return i, ascii_class + (i - start) // 4


def _repetition(pattern: str, i: int) -> tuple[int, int] | None:
    """For ``{m}``, ``{m,}`` or ``{m,n}`` opened before ``i``: (index past it, copies)."""
    end = pattern.find("}", i)
    if end < 0:
        return None
    low, comma, high = pattern[i:end].partition(",")
    if not low.strip().isdigit() or (high.strip() and not high.strip().isdigit()):
        return None
    m = int(low)
    if not comma:
        return end + 1, max(m, 1)
    if not high.strip():
        return end + 1, m + 1
    n = max(int(high), m)
    return end + 1, max(n + (n - m), 1)  # optional copies cost about twice a plain one
