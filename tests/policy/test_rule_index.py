"""The rule index (execauth.policy.rule_index): ``evaluate`` skips only rules that are false.

A rule is skipped when a ``path == literal`` (or ``path != literal``) at the top of its
``&&`` chain is certainly false for the request, judged on the value as the CEL
activation holds it. Skipping must change nothing: the last properties compare
``evaluate`` with ``trace`` (which runs every rule) and with every rule run on its own,
over generated policies and requests full of near misses (``"1"`` against ``1``, ``1.0``
against ``1``, ``true`` against ``1``, nulls, missing paths, lists).
"""

from __future__ import annotations

import json
import textwrap
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

import cel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from execauth.policy.decision import Decision, Outcome, PolicyRef, Reason
from execauth.policy.document import parse_policy_document
from execauth.policy.engine import (
    CompiledBlock,
    CompiledRule,
    _conclude,
    compile_policy,
    evaluate,
    trace,
)
from execauth.policy.rule_index import Conjunct, conjuncts

NOW = datetime(2026, 3, 14, 12, 0, 0, tzinfo=UTC)
ORG = {"id": "org_01hzzzzzzzzzzzzzzzzzzzzzzz", "plan": "free"}
REF = PolicyRef("p", 1, "sha256:" + "0" * 64)


def _block(*rules: tuple[str, str]) -> CompiledBlock:
    """One block for ``a.b`` of ``(effect, condition)`` rules, ids r0, r1, …"""
    listed = [{"id": f"r{i}", effect: condition} for i, (effect, condition) in enumerate(rules)]
    document = {"policy_id": "p", "surfaces": [{"match": "a.b", "rules": listed}]}
    parsed = parse_policy_document(json.dumps(document), policy_id="p")
    return compile_policy(parsed, REF).blocks[0]


def _request(**fields: Any) -> dict[str, Any]:
    return {"surface": "a.b", "context": {}, "payload": {}, **fields}


def _skipped(block: CompiledBlock, request: dict[str, Any], org: Any = ORG) -> list[str]:
    excluded = block.index.excluded(request, org)
    return [rule.id for i, rule in enumerate(block.rules) if excluded >> i & 1]


# --- what is indexed ----------------------------------------------------------------------


def test_the_comparisons_at_the_top_of_an_and_chain_are_indexed() -> None:
    found = conjuncts('context.branch == "main" && (actor != "bot" && 3 == payload.n)')
    assert sorted(found, key=repr) == sorted(
        [
            Conjunct("context", ("branch",), "equal", (("string", "main"),)),
            Conjunct("actor", (), "unequal", (("string", "bot"),)),
            Conjunct("payload", ("n",), "equal", (("int", 3),)),
        ],
        key=repr,
    )


def test_membership_in_a_literal_list_is_an_equal_test_of_each() -> None:
    assert conjuncts('payload.service in ["a", "b"]') == [
        Conjunct("payload", ("service",), "equal", (("string", "a"), ("string", "b")))
    ]


@pytest.mark.parametrize(
    "condition",
    ['"frozen" in payload.labels', 'payload.labels.exists(l, l == "frozen")',
     'payload.labels.exists(l, "frozen" == l)'],
)  # fmt: skip
def test_a_list_holding_a_literal_is_a_member_test(condition: str) -> None:
    assert conjuncts(condition) == [
        Conjunct("payload", ("labels",), "member", (("string", "frozen"),))
    ]


@pytest.mark.parametrize(
    "condition",
    [
        'context.branch == "main" || actor == "bot"',  # a disjunction: either may hold
        '!(context.branch == "main")',
        'context.branch == "main" ? true : false',
        'payload.labels.exists(l, l == "x" && actor == "y")',  # inside a comprehension
        'payload.labels.exists(l, l != "x")',
        'payload.labels.all(l, l == "x")',
        'payload.labels.exists(l, actor == "x")',  # the predicate does not test the item
        "payload.labels.exists(l, l == 1.0)",
        'payload.service in ["a", 1]',  # literals of two types
        "payload.service in []",
        "payload.service in payload.allowed",
        "payload.n == 1.0",  # a double: 1 == 1.0 in CEL
        "payload.n == 1u",
        "payload.n == -3",  # a negation, not a literal
        "payload.n == null",
        'context.branch == b"main"',
        'context["branch"] == "main"',
        "context.branch == payload.branch",
        'now == "x"',
        'context.branch == "ma\\x69n"',  # an escape: read as the compiler reads it, or not at all
    ],
)
def test_what_is_not_certain_is_not_indexed(condition: str) -> None:
    assert conjuncts(condition) == []


def test_unreadable_source_is_not_indexed() -> None:
    assert conjuncts('context.branch == "main" && )') == []


# --- which rules a request skips -----------------------------------------------------------


def test_a_rule_whose_literal_differs_from_the_value_is_skipped() -> None:
    block = _block(
        ("deny", 'context.branch == "hotfix" && actor != "release-bot"'),
        ("permit", 'context.branch == "main"'),
    )
    request = _request(actor="alice", context={"branch": "main"})
    assert _skipped(block, request) == ["r0"]
    assert evaluate(block, request, now=NOW, org=ORG).rule_id == "r1"


def test_a_rule_comparing_unequal_to_the_value_itself_is_skipped() -> None:
    block = _block(
        ("deny", 'payload.n > 100 && context.branch != "main"'),
        ("deny", 'context.branch != "main" && payload.n > 10'),
    )
    assert _skipped(block, _request(context={"branch": "main"})) == ["r0", "r1"]
    assert _skipped(block, _request(context={"branch": "dev"})) == []


def test_a_skipped_rule_is_false_even_where_its_other_conjuncts_fail() -> None:
    # CEL's && absorbs the error of 1 / 0 and the non-boolean payload.n: both orders false.
    block = _block(
        ("deny", 'context.branch == "dev" && 1 / payload.n > 0'),
        ("deny", '1 / payload.n > 0 && context.branch == "dev"'),
        ("deny", 'payload.n && context.branch == "dev"'),
    )
    request = _request(context={"branch": "main"}, payload={"n": 0})
    assert _skipped(block, request) == ["r0", "r1", "r2"]
    assert [r.value for r in trace(block, request, now=NOW, org=ORG).rules] == [False] * 3


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("1", "1"),  # a string that looks like a number stays a string in CEL
        ("1", 1.0),  # 1 == 1.0 is true in CEL
        ("1", True),
        ('"true"', True),
        ("true", 1),
        ('"x"', ["x"]),
        ('"x"', {"x": 1}),
        ("1", 2**63),  # a CEL uint, not an int
        ('"x"', None),
    ],
    ids=repr,
)
def test_a_value_of_another_cel_type_than_the_literal_skips_nothing(
    literal: str, value: Any
) -> None:
    block = _block(
        ("permit", f"payload.v == {literal}"), ("deny", f"payload.v == {literal} && false")
    )
    request = _request(payload={"v": value})
    assert _skipped(block, request) == []
    assert (
        evaluate(block, request, now=NOW, org=ORG)
        == trace(block, request, now=NOW, org=ORG).decision
    )


def test_a_missing_path_skips_nothing_and_its_error_still_decides() -> None:
    block = _block(("deny", 'context.branch == "dev"'), ("deny", 'context.branch == "qa"'))
    for request in (_request(), _request(context=["branch"]), {"surface": "a.b"}):
        assert _skipped(block, request) == []
        decision = evaluate(block, request, now=NOW, org=ORG)
        assert (decision.outcome, decision.rule_id) == (Outcome.SILENCE, "r0")


def test_a_null_skips_nothing() -> None:
    # null == "dev" is false in CEL, but null is not the literal's type: the rule runs.
    block = _block(
        ("deny", 'context.branch == "dev"'), ("deny", 'context.branch == "qa"'), ("permit", "true")
    )
    request = _request(context={"branch": None})
    assert _skipped(block, request) == []
    assert evaluate(block, request, now=NOW, org=ORG).outcome is Outcome.PERMIT


def test_a_path_through_a_mapping_that_is_not_a_dict_skips_nothing() -> None:
    block = _block(("deny", 'context.branch == "dev"'), ("deny", 'context.branch == "qa"'))
    request = _request(context=OrderedDict(branch="main"))
    assert _skipped(block, request) == []


def test_org_facts_are_indexed_like_the_request() -> None:
    block = _block(
        ("permit", 'org.plan == "enterprise" && actor == "alice"'),
        ("deny", 'org.plan == "enterprise" && actor == "mallory"'),
    )
    assert _skipped(block, _request(actor="alice")) == ["r0", "r1"]
    assert _skipped(block, _request(actor="alice"), {**ORG, "plan": "enterprise"}) == ["r1"]


def test_the_rules_left_run_in_their_order_so_the_first_failure_still_decides() -> None:
    block = _block(
        ("deny", 'context.branch == "dev" && 1 / payload.n > 0'),  # skipped
        ("permit", "1 / payload.n > 0"),  # fails: it decides
        ("deny", "payload.n.startsWith(1)"),  # would fail too, later
    )
    request = _request(context={"branch": "main"}, payload={"n": 0})
    decision = evaluate(block, request, now=NOW, org=ORG)
    assert (decision.outcome, decision.rule_id) == (Outcome.SILENCE, "r1")
    assert decision == trace(block, request, now=NOW, org=ORG).decision


@pytest.mark.parametrize(
    ("labels", "skipped"),
    [
        (["canary", "eu"], ["r0", "r1"]),
        (["canary", "frozen"], ["r1"]),
        ([], ["r0", "r1"]),  # nothing is in an empty list
        (["canary", 1], []),  # items of two types
        ([1, 2], []),  # items of another type than the literals
        ({"frozen": 1}, []),  # a map: ``in`` tests its keys
        ("frozen", []),
        (["x"] * 65, []),  # longer than the index looks through
    ],
    ids=repr,
)
def test_a_list_lacking_the_literal_skips_its_member_rules(labels: Any, skipped: list[str]) -> None:
    block = _block(
        ("deny", '"frozen" in payload.labels'),
        ("deny", 'payload.labels.exists(l, l == "locked")'),
    )
    request = _request(payload={"labels": labels})
    assert _skipped(block, request) == skipped
    assert (
        evaluate(block, request, now=NOW, org=ORG)
        == trace(block, request, now=NOW, org=ORG).decision
    )


def test_a_path_only_one_rule_tests_is_not_indexed() -> None:
    # Looking the path up would cost about what running that one rule does.
    block = _block(("deny", 'actor == "mallory"'), ("permit", 'context.branch == "main"'))
    assert block.index.paths == ()


def test_trace_still_records_every_rule() -> None:
    block = _block(("deny", 'actor == "mallory"'), ("permit", 'actor == "alice"'))
    recorded = trace(block, _request(actor="alice"), now=NOW, org=ORG)
    assert [(r.rule.id, r.value) for r in recorded.rules] == [("r0", False), ("r1", True)]


# --- skipping changes nothing: generated policies and requests -----------------------------

PATHS = ("actor", "action", "context.a", "context.m.a", "payload.n", "payload.s", "org.plan")
LITERALS = (
    '"x"', '"1"', '"main"', '""', "'x'", 'r"x"', '"""x"""', '"\\x78"', '"é"',
    "1", "0", "-3", "0x1", "9223372036854775807", "1u", "1.0", "true", "false", "null", "[]",
)  # fmt: skip
VALUES: tuple[Any, ...] = (
    "x", "1", "main", "", "é", "\ud800", 1, 0, -3, 2**63, 2**64, 1.0, 0.0, float("nan"),
    True, False, None, [], ["x"], [1], {}, {"a": "x"}, {"a": 1}, b"x", ["x", "main"],
    ["1", 1], [True], [1, 0], ["x", None], [["x"]], ("x",), [1.0], {"x": 1}, ["\ud800"],
)  # fmt: skip


# Mostly literals the index reads, on a few paths, so that paths are indexed and rules
# skipped; now and then a literal it must not read (escapes, doubles, uints, null, -3).
_literal = st.sampled_from(('"x"', '"main"', '"1"', '""', "1", "0", "true")) | st.sampled_from(
    LITERALS
)
_path = st.sampled_from(("context.a", "payload.n", "payload.s")) | st.sampled_from(PATHS)
_comparison = st.one_of(
    st.builds("{} == {}".format, _path, _literal),
    st.builds("{1} == {0}".format, _path, _literal),
    st.builds("{} != {}".format, _path, _literal),
    st.builds("{} in {}".format, _literal, _path),
    st.builds("{}.exists(v, v == {})".format, _path, _literal),
    st.builds("{}.exists(v, v != {})".format, _path, _literal),  # not indexed
    st.builds("{} in [{}, {}]".format, _path, _literal, _literal),
)
_other = st.one_of(
    st.builds("1 / {} > 0".format, st.sampled_from(PATHS)),  # fails: division by zero, types
    st.sampled_from(PATHS),  # not a boolean unless the value is one
    st.builds('{}.startsWith("m")'.format, st.sampled_from(PATHS)),
    st.builds("size({}) > 0".format, st.sampled_from(PATHS)),
    st.sampled_from(("true", "false", "undefined_name == 1", "payload.m.a.b == 1")),
)
_atom = _comparison | _comparison | _comparison | _other
_nested = st.recursive(
    _atom,
    lambda inner: st.one_of(
        st.builds("({} && {})".format, inner, inner),
        st.builds("({} || {})".format, inner, inner),
        st.builds("!({})".format, inner),
    ),
    max_leaves=3,
)
# Mostly a chain of && at the top (what the index reads), of atoms or nested conditions.
_condition = st.lists(_atom | _nested, min_size=1, max_size=4).map(" && ".join) | _nested


@st.composite
def _blocks(draw: st.DrawFn) -> CompiledBlock:
    rules: list[dict[str, Any]] = []
    for index, condition in enumerate(draw(st.lists(_condition, min_size=2, max_size=8))):
        effect = draw(st.sampled_from(("permit", "deny", "escalate")))
        rules.append({"id": f"r{index}", effect: condition})
    document = {"policy_id": "p", "surfaces": [{"match": "a.b", "rules": rules}]}
    parsed = parse_policy_document(json.dumps(document), policy_id="p")
    # publishing=False: a generated condition may read a name no policy could publish
    # (``undefined_name``); its evaluation error must still decide as before.
    return compile_policy(parsed, REF, publishing=False).blocks[0]


# Often a value of a literal's type, so that rules are skipped as well as run.
_value = st.sampled_from(
    (*VALUES, *(("x", "1", "main", 1, 0, True, ["x", "main"], ["1"]) * 4), {"a": "x"})
)


@st.composite
def _requests(draw: st.DrawFn) -> dict[str, Any]:
    """A request holding a value at most of the indexed paths (a map, a list or nothing
    at the others), now and then a context that is no map at all."""
    request: dict[str, Any] = {"surface": "a.b"}
    for path in PATHS:
        *parents, last = path.split(".")
        if parents == ["org"] or draw(st.integers(0, 9)) == 0:
            continue
        target = request
        for key in parents:
            target = target.setdefault(key, {}) if isinstance(target.get(key, {}), dict) else {}
        target[last] = draw(_value)
    if draw(st.integers(0, 9)) == 0:
        request["context"] = draw(_value)
    return request


_orgs = st.fixed_dictionaries({"id": st.just("org_p"), "plan": _value})


def _every_rule_run(block: CompiledBlock, request: dict[str, Any], org: dict[str, Any]) -> Decision:
    """The reference: each rule run on the whole activation, in order, none skipped."""
    try:
        activation = cel.Context({**request, "now": NOW, "org": dict(org)})
    except Exception as exc:  # the reference records any failure, as the engine does
        message = f"request cannot be evaluated: {exc}"
        return Decision(Outcome.SILENCE, None, Reason.EVALUATION_ERROR, message)
    matched: dict[str, list[CompiledRule]] = {"permit": [], "deny": [], "escalate": []}
    for rule in block.rules:
        try:
            value = rule.program.execute(activation)
        except Exception as exc:  # any failure is SILENCE, as in the engine
            message = f"rule {rule.id} could not be evaluated: {type(exc).__name__}: {exc}"
            return Decision(Outcome.SILENCE, rule.id, Reason.EVALUATION_ERROR, message)
        if value is not True and value is not False:
            message = f"rule {rule.id} returned {type(value).__name__}, not a boolean"
            return Decision(Outcome.SILENCE, rule.id, Reason.EVALUATION_ERROR, message)
        if value:
            matched[rule.effect].append(rule)
    return _conclude(matched["permit"], matched["deny"], matched["escalate"])


INDEX_PROPERTIES = settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@INDEX_PROPERTIES
@given(_blocks(), _requests(), _orgs)
def test_evaluate_decides_as_trace_and_as_every_rule_run(
    block: CompiledBlock, request: dict[str, Any], org: dict[str, Any]
) -> None:
    decision = evaluate(block, request, now=NOW, org=org)
    assert decision == trace(block, request, now=NOW, org=org).decision
    assert decision == _every_rule_run(block, request, org)


@INDEX_PROPERTIES
@given(_blocks(), _requests(), _orgs)
def test_every_skipped_rule_is_false_when_run(
    block: CompiledBlock, request: dict[str, Any], org: dict[str, Any]
) -> None:
    try:
        activation = cel.Context({**request, "now": NOW, "org": dict(org)})
    except Exception:  # nothing runs: the request is SILENCE whole
        return
    excluded = block.index.excluded(request, org)
    for position, rule in enumerate(block.rules):
        if excluded >> position & 1:
            assert rule.program.execute(activation) is False, rule.source


def test_the_generated_requests_do_skip_rules_and_do_meet_failures() -> None:
    """The properties are not vacuous: rules are skipped, and skipped rules sit among
    rules that fail, that are not boolean and that match."""
    seen = {"skipped": 0, "skipped-before-failure": 0, "not-skipped": 0}

    @settings(max_examples=500, deadline=None, database=None, derandomize=True)
    @given(_blocks(), _requests(), _orgs)
    def probe(block: CompiledBlock, request: dict[str, Any], org: dict[str, Any]) -> None:
        excluded = block.index.excluded(request, org)
        decision = evaluate(block, request, now=NOW, org=org)
        if excluded:
            seen["skipped"] += 1
            first = (excluded & -excluded).bit_length() - 1
            failing = decision.reason == Reason.EVALUATION_ERROR and decision.rule_id
            if failing and int(failing[1:]) > first:
                seen["skipped-before-failure"] += 1
        elif block.index.paths:
            seen["not-skipped"] += 1

    probe()  # derandomized: the same examples every run, so these counts are stable
    assert seen["skipped"] >= 10, seen
    assert seen["skipped-before-failure"] >= 2, seen
    assert seen["not-skipped"] >= 10, seen


def test_the_benchmark_policy_shape_skips_the_rules_its_request_cannot_match() -> None:
    # bench/micro/conftest.py's kinds of rules: what the index saves on the request path.
    source = textwrap.dedent(
        """
        context.branch == "hotfix-0" && actor != "release-bot"
        payload.service == "svc-1" && payload.replicas > 11
        actor == "user-2" && context.ticket.startsWith("CHG-")
        payload.region == "region-3" || payload.commit == "bad3"
        payload.replicas > 104 && context.branch != "main"
        context.pipeline.startsWith("jenkins/5") && payload.canary == false
        """
    ).split("\n")[1:-1]
    block = _block(*(("deny", s) for s in source), ("permit", 'context.branch == "main"'))
    request = _request(
        actor="release-bot",
        context={"branch": "main", "ticket": "CHG-1", "pipeline": "gh/1"},
        payload={
            "service": "checkout",
            "replicas": 6,
            "region": "eu",
            "commit": "4f",
            "canary": True,
        },
    )
    # service and canary are tested by one rule each here: not indexed
    assert _skipped(block, request) == ["r0", "r2", "r4"]
    assert evaluate(block, request, now=NOW, org=ORG).outcome is Outcome.PERMIT
