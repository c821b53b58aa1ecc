"""The names a condition may use, and the ones it uses that the evaluator does not define.

``contxt.branch == "main"`` compiles — CEL resolves variables only when it runs — and
then fails at every evaluation: every request would be SILENCE. So publishing (and
``execauth policy check``) refuses any name that is neither one of the evaluator's
variables, a CEL type name, a comprehension's own variable in scope, nor a field of
``org`` (docs/policy-language.md "Variables"). Functions are checked by the engine
against ``engine.ALLOWED_FUNCTIONS``. Pure: walks the syntax tree of ``policy.cel_syntax``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from execauth.policy.cel_syntax import CelSyntaxError, Node, parse

# What ``engine.evaluate`` puts in the CEL activation (``ExecuteRequest.evaluation_input``
# plus ``now`` and ``org``): the only free variables a condition can read.
VARIABLES = ("surface", "action", "actor", "context", "payload", "now", "org")
# CEL's type denotations, usable as values: ``type(context.n) == int``.
TYPE_NAMES = frozenset(
    {"bool", "int", "uint", "double", "string", "bytes", "list", "map", "null_type", "type"}
)
# ``Org.facts()``: the stable fields a policy sees as ``org`` (replay stays exact).
ORG_FIELDS = ("id", "plan")
_DEFINED = frozenset(VARIABLES) | TYPE_NAMES


@dataclass(frozen=True, slots=True)
class UnknownName:
    """A name the evaluator does not define, with the closest one it does (if any)."""

    name: str
    suggestion: str | None

    def __str__(self) -> str:
        hint = f" (did you mean {self.suggestion!r}?)" if self.suggestion else ""
        return f"{self.name!r}{hint}"


def unknown_names(source: str) -> list[UnknownName]:
    """The undefined names ``source`` uses, each once, in order of appearance.

    Source this parser cannot read gives ``[]``: ``policy.cost`` refuses it at publish
    ("cost cannot be bounded"), so nothing unreadable is published either way.
    """
    try:
        tree = parse(source)
    except CelSyntaxError:
        return []
    found: dict[str, UnknownName] = {}
    # Iterative, scopes carried along: a comprehension's variable is bound in its
    # predicate or transform, not in its receiver (``xs.all(x, …)``: ``xs`` is free).
    pending: list[tuple[Node, frozenset[str]]] = [(tree, frozenset())]
    while pending:
        node, bound = pending.pop()
        unknown = _unknown(node, bound)
        if unknown is not None and unknown.name not in found:
            found[unknown.name] = unknown
        if node.kind == "macro":
            receiver, *body = node.children
            inner = bound | {str(node.value)}
            pending.extend((child, inner) for child in reversed(body))
            pending.append((receiver, bound))
        else:
            pending.extend((child, bound) for child in reversed(node.children))
    return list(found.values())


def _unknown(node: Node, bound: frozenset[str]) -> UnknownName | None:
    if node.kind == "ident":
        name = node.name.removeprefix(".")  # ``.context``: the root scope, same variables
        if name in _DEFINED or name in bound:
            return None
        return UnknownName(node.name, closest(name, (*VARIABLES, *bound)))
    field = _org_field(node, bound)
    if field is not None and field not in ORG_FIELDS:
        return UnknownName(f"org.{field}", closest(field, ORG_FIELDS, prefix="org."))
    return None


def _org_field(node: Node, bound: frozenset[str]) -> str | None:
    """The field of ``org`` that ``node`` reads by name (``org.plan``, ``org["plan"]``)."""
    if not node.children:
        return None
    target = node.children[0]
    if target.kind != "ident" or target.name != "org" or "org" in bound:
        return None
    if node.kind == "select":
        return node.name
    key = node.children[1] if node.kind == "index" else None
    if key is not None and key.kind == "literal" and isinstance(key.value, str):
        return key.value
    return None


def closest(name: str, known: Iterable[str], prefix: str = "") -> str | None:
    """The known name ``name`` is most likely a typo of (``difflib``'s ratio ≥ 0.6), if any."""
    matches = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return prefix + matches[0] if matches else None
