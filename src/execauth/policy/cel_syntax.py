"""A CEL parser for analysis: the syntax tree of a condition, so its cost can be bounded.

The ``cel`` package compiles and runs expressions but exposes no syntax tree, and the
evaluation cost limit (``policy.cost``) needs one: what each operator is applied to,
which calls sit inside which comprehension, which regular expressions are literals.
This follows the CEL grammar (github.com/google/cel-spec, doc/langdef.md "Syntax") and
runs only on source that ``cel.compile`` accepted. Anything it cannot read raises
``CelSyntaxError``; callers treat that as "cost unknown", never as "free". Pure.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
MAX_NESTING = 100  # cel-go's default parser recursion limit is 250; we stay well below

_RESERVED = frozenset(
    {
        "as", "break", "const", "continue", "else", "for", "function", "if", "import",
        "let", "loop", "package", "namespace", "return", "var", "void", "while",
    }
)  # fmt: skip
_TOKEN = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<string>(?:[rR][bB]?|[bB][rR]?)?(?:'''|\"\"\"|'|\"))
  | (?P<number>0[xX][0-9a-fA-F]+[uU]?
      |(?:[0-9]+\.[0-9]+|\.[0-9]+)(?:[eE][+-]?[0-9]+)?
      |[0-9]+[eE][+-]?[0-9]+
      |[0-9]+[uU]?)
  | (?P<ident>[_a-zA-Z][_a-zA-Z0-9]*)
  | (?P<op>==|!=|<=|>=|&&|\|\||[-+*/%<>!?:.,()\[\]{}])
    """,
    re.VERBOSE,
)
_ESCAPES = {
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
    "\\": "\\", "'": "'", '"': '"', "`": "`", "?": "?",
}  # fmt: skip
# Binary operators by precedence, loosest first (cel-spec langdef.md "Syntax").
_PRECEDENCE = {
    "||": 0, "&&": 1,
    "==": 2, "!=": 2, "<": 2, "<=": 2, ">": 2, ">=": 2, "in": 2,
    "+": 3, "-": 3, "*": 4, "/": 4, "%": 4,
}  # fmt: skip


class CelSyntaxError(ValueError):
    """The source is not an expression this parser can read."""


@dataclass(frozen=True, slots=True)
class Node:
    """One node of the syntax tree.

    ``kind`` is one of: ``literal`` (``value``: the Python value, ``name``: its CEL type),
    ``ident`` (``name``), ``select`` (``name``: the field; one child), ``index`` (two),
    ``call`` (``name``; children are the arguments, the receiver first when ``receiver``),
    ``macro`` (``name``: all, exists, …; ``value``: the variable; children: receiver,
    then the predicate or transform, and for three-argument ``map`` both), ``has``
    (one child, the ``select`` tested), ``list``, ``map`` (children alternate key and
    value), ``message`` (``name``: the type; children are the field values), ``unary``
    and ``binary`` (``name``: the operator), ``conditional`` (three children).
    """

    kind: str
    name: str = ""
    children: tuple[Node, ...] = ()
    value: object = None
    receiver: bool = False


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # string, number, ident, op, end
    text: str
    string: tuple[str, bool] | None = None  # a string literal's (value, is bytes)


# Publishing reads each condition three times (names, cost, the rule index): the trees
# of the last few documents' conditions are kept (a tree is immutable; a failure is not
# kept and is raised again).
@functools.lru_cache(maxsize=2048)
def parse(source: str) -> Node:
    """The syntax tree of ``source``; ``CelSyntaxError`` when it cannot be read."""
    parser = _Parser(_tokenize(source))
    try:
        node = parser.expression()
    except RecursionError as exc:
        raise CelSyntaxError("the expression nests too deeply") from exc
    if parser.peek().kind != "end":
        raise CelSyntaxError(f"unexpected {parser.peek().text!r}")
    return node


def walk(node: Node) -> list[Node]:
    """Every node of the tree, ``node`` first (iteratively: trees can be deep)."""
    found: list[Node] = []
    pending = [node]
    while pending:
        current = pending.pop()
        found.append(current)
        pending.extend(reversed(current.children))
    return found


# --- lexing ------------------------------------------------------------------------------


def _tokenize(source: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    while i < len(source):
        match = _TOKEN.match(source, i)
        if match is None:
            raise CelSyntaxError(f"unexpected character {source[i]!r}")
        kind = match.lastgroup or ""
        if kind == "string":
            prefix = match.group().rstrip("'\"").lower()
            i, value = _string(source, i + len(prefix), raw="r" in prefix)
            tokens.append(_Token("string", source[match.start() : i], (value, "b" in prefix)))
            continue
        i = match.end()
        if kind != "space":
            tokens.append(_Token(kind, match.group()))
    tokens.append(_Token("end", "end of expression"))
    return tokens


def _string(source: str, start: int, *, raw: bool) -> tuple[int, str]:
    """(index past the literal, its value) for the literal whose quote is at ``start``."""
    quote = source[start : start + 3] if source.startswith(("'''", '"""'), start) else source[start]
    i = start + len(quote)
    out: list[str] = []
    while i < len(source):
        if source.startswith(quote, i):
            return i + len(quote), "".join(out)
        char = source[i]
        if char == "\\" and not raw and i + 1 < len(source):
            i, decoded = _escape(source, i + 1)
            out.append(decoded)
            continue
        out.append(char)
        i += 1
    raise CelSyntaxError("unterminated string literal")


def _escape(source: str, i: int) -> tuple[int, str]:
    char = source[i]
    if char in _ESCAPES:
        return i + 1, _ESCAPES[char]
    digits = {"x": 2, "X": 2, "u": 4, "U": 8}.get(char)
    if digits is not None:
        return i + 1 + digits, chr(int(source[i + 1 : i + 1 + digits], 16))
    if char in "0123":
        return i + 3, chr(int(source[i : i + 3], 8))
    raise CelSyntaxError(f"unknown escape \\{char}")


# --- parsing -------------------------------------------------------------------------------


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self._tokens = tokens
        self._at = 0
        self._depth = 0

    def peek(self) -> _Token:
        return self._tokens[self._at]

    def _take(self) -> _Token:
        token = self._tokens[self._at]
        self._at += 1
        return token

    def _accept(self, text: str) -> bool:
        token = self.peek()
        if token.kind in {"op", "ident"} and token.text == text:
            self._at += 1
            return True
        return False

    def _expect(self, text: str) -> None:
        if not self._accept(text):
            raise CelSyntaxError(f"expected {text!r}, found {self.peek().text!r}")

    def expression(self) -> Node:
        self._depth += 1
        if self._depth > MAX_NESTING:
            raise CelSyntaxError(f"the expression nests more than {MAX_NESTING} levels deep")
        condition = self._binary(0)
        if self._accept("?"):
            then = self._binary(0)
            self._expect(":")
            condition = Node("conditional", "?:", (condition, then, self.expression()))
        self._depth -= 1
        return condition

    def _binary(self, loosest: int) -> Node:
        """Precedence climbing: operators of level ``loosest`` or tighter, left-associative."""
        left = self._unary()
        while True:
            token = self.peek()
            level = _PRECEDENCE.get(token.text) if token.kind in {"op", "ident"} else None
            if level is None or level < loosest:
                return left
            self._take()
            left = Node("binary", token.text, (left, self._binary(level + 1)))

    def _unary(self) -> Node:
        operators: list[str] = []
        while self.peek().kind == "op" and self.peek().text in {"!", "-"}:
            operators.append(self._take().text)
        node = self._member()
        for operator in reversed(operators):
            node = Node("unary", operator, (node,))
        return node

    def _member(self) -> Node:
        node = self._primary()
        while True:
            if self._accept("."):
                name = self._identifier()
                if self._accept("("):
                    node = self._call(name, node)
                else:
                    node = Node("select", name, (node,))
            elif self._accept("["):
                node = Node("index", "[]", (node, self.expression()))
                self._expect("]")
            elif self.peek().text == "{" and node.kind in {"ident", "select"}:
                self._take()
                node = self._message(node)
            else:
                return node

    def _primary(self) -> Node:
        token = self._take()
        if token.kind == "string":
            assert token.string is not None  # the lexer sets it on every string token
            value, is_bytes = token.string
            return Node("literal", "bytes" if is_bytes else "string", value=value)
        if token.kind == "number":
            return _number(token.text)
        if token.kind == "op" and token.text == "(":
            node = self.expression()
            self._expect(")")
            return node
        if token.kind == "op" and token.text == "[":
            return Node("list", "[]", tuple(self._items("]")))
        if token.kind == "op" and token.text == "{":
            return Node("map", "{}", tuple(self._entries("}")))
        if token.kind == "op" and token.text == ".":
            return self._named("." + self._identifier())
        if token.kind == "ident":
            literal = {"true": True, "false": False, "null": None}
            if token.text in literal:
                return Node("literal", "null" if token.text == "null" else "bool",
                            value=literal[token.text])  # fmt: skip
            if token.text in _RESERVED or token.text == "in":
                raise CelSyntaxError(f"reserved word {token.text!r}")
            return self._named(token.text)
        raise CelSyntaxError(f"unexpected {token.text!r}")

    def _named(self, name: str) -> Node:
        if not self._accept("("):
            return Node("ident", name)
        if name == "has":
            (tested,) = self._items(")")
            if tested.kind != "select":
                raise CelSyntaxError("has() takes a field selection, e.g. has(context.ticket)")
            return Node("has", "has", (tested,))
        return Node("call", name, tuple(self._items(")")))

    def _call(self, name: str, target: Node) -> Node:
        arguments = self._items(")")
        variable = arguments[0] if arguments else None
        arity = {"map": (2, 3)}.get(name, (2,))
        if name in MACROS and len(arguments) in arity and variable and variable.kind == "ident":
            return Node("macro", name, (target, *arguments[1:]), value=variable.name)
        return Node("call", name, (target, *arguments), receiver=True)

    def _message(self, type_name: Node) -> Node:
        values: list[Node] = []
        while not self._accept("}"):
            self._identifier()
            self._expect(":")
            values.append(self.expression())
            if not self._accept(","):
                self._expect("}")
                break
        return Node("message", _dotted(type_name), tuple(values))

    def _items(self, closer: str) -> list[Node]:
        items: list[Node] = []
        while not self._accept(closer):
            items.append(self.expression())
            if not self._accept(","):
                self._expect(closer)
                break
        return items

    def _entries(self, closer: str) -> list[Node]:
        entries: list[Node] = []
        while not self._accept(closer):
            entries.append(self.expression())
            self._expect(":")
            entries.append(self.expression())
            if not self._accept(","):
                self._expect(closer)
                break
        return entries

    def _identifier(self) -> str:
        token = self._take()
        if token.kind != "ident":
            raise CelSyntaxError(f"expected a name, found {token.text!r}")
        return token.text


def _number(text: str) -> Node:
    unsigned = text[-1] in "uU"
    digits = text.rstrip("uU")
    if digits[:2].lower() == "0x":
        return Node("literal", "uint" if unsigned else "int", value=int(digits, 16))
    if any(c in digits for c in ".eE"):
        return Node("literal", "double", value=float(digits))
    return Node("literal", "uint" if unsigned else "int", value=int(digits))


def _dotted(node: Node) -> str:
    if node.kind == "select":
        return _dotted(node.children[0]) + "." + node.name
    return node.name
