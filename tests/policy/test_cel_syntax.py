"""The CEL parser behind cost analysis (execauth.policy.cel_syntax)."""

from __future__ import annotations

from pathlib import Path

import pytest

from execauth.policy.cel_syntax import CelSyntaxError, Node, parse, walk
from execauth.policy.document import parse_policy_document

COOKBOOK = Path(__file__).resolve().parents[2] / "examples" / "policies"


def _cookbook_conditions() -> list[str]:
    return [
        rule.condition
        for path in sorted(COOKBOOK.glob("*.yaml"))
        if not path.name.endswith(".cases.yaml")
        for block in parse_policy_document(path.read_text(), policy_id=path.stem).blocks
        for rule in block.rules
    ]


@pytest.mark.parametrize("condition", _cookbook_conditions())
def test_every_cookbook_condition_parses(condition: str) -> None:
    # A bare field (``escalate: context.destructiveHint``) is a condition too.
    kinds = {"binary", "unary", "literal", "call", "macro", "select"}
    assert parse(condition).kind in kinds


def test_operators_bind_by_cel_precedence() -> None:
    tree = parse("a || b && c == 1 + 2 * 3")
    assert (tree.name, tree.children[1].name) == ("||", "&&")
    relation = tree.children[1].children[1]
    assert (relation.name, relation.children[1].name) == ("==", "+")
    assert relation.children[1].children[1].name == "*"


def test_addition_chains_associate_to_the_left() -> None:
    tree = parse("a + b + c")
    assert tree.children[0].name == "+"
    assert tree.children[1] == Node("ident", "c")


def test_receiver_style_comprehensions_are_macros() -> None:
    tree = parse("xs.map(x, x > 0, x * 2)")
    assert (tree.kind, tree.name, tree.value) == ("macro", "map", "x")
    assert len(tree.children) == 3  # receiver, filter, transform


def test_a_call_named_like_a_macro_without_a_variable_is_a_call() -> None:
    assert parse("xs.all(1, 2)").kind == "call"


def test_has_takes_a_field_selection() -> None:
    assert parse("has(context.ticket)").kind == "has"
    with pytest.raises(CelSyntaxError):
        parse("has(context)")


@pytest.mark.parametrize(
    ("source", "value"),
    [
        (r'"a\\w\x41\u00e9\101"', "a\\wAéA"),
        (r"r'\d+'", "\\d+"),
        ("'''it's\nmultiline'''", "it's\nmultiline"),
        ('"// not a comment"', "// not a comment"),
    ],
)
def test_string_literals_are_decoded(source: str, value: str) -> None:
    assert parse(source) == Node("literal", "string", value=value)


@pytest.mark.parametrize(
    ("source", "kind", "value"),
    [("0x1F", "int", 31), ("7u", "uint", 7), ("1e3", "double", 1000.0), (".5", "double", 0.5)],
)
def test_number_literals_are_typed(source: str, kind: str, value: object) -> None:
    assert parse(source) == Node("literal", kind, value=value)


def test_comments_are_skipped() -> None:
    assert parse("a // xs.all(x, true)\n == 1").name == "=="


def test_long_operator_chains_do_not_exhaust_the_stack() -> None:
    tree = parse(" + ".join(["xs"] * 1000))
    assert len(walk(tree)) == 1999


@pytest.mark.parametrize("source", ["(" * 100 + "1" + ")" * 100, "a +", "a ? b", "in", "'open"])
def test_what_cannot_be_read_is_a_syntax_error(source: str) -> None:
    with pytest.raises(CelSyntaxError):
        parse(source)
