"""The benchmark's policy (bench/policy.yaml) permits the benchmark's request at any time.

``make bench`` refuses to measure unless its request is a PERMIT. A rule that reads the
clock and matches at some hours of the week (it once froze Friday afternoons) makes the
benchmark fail then, and measure something else if the check were skipped.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from execauth.policy.decision import Outcome, PolicyRef
from execauth.policy.document import parse_policy_document
from execauth.policy.engine import PolicySet, compile_policy, evaluate
from execauth.request import parse_execute_request

BENCH_POLICY = Path(__file__).parents[2] / "bench" / "policy.yaml"

# The fields of bench/wrk/execauth.lua's request that the deploy.production rules read.
REQUEST = {
    "surface": "deploy.production",
    "action": "deploy",
    "actor": "release-bot",
    "context": {"branch": "main", "ticket": "CHG-4821", "pipeline": "gh-actions/0"},
    "payload": {"service": "checkout-api", "replicas": 6, "region": "eu-west-1"},
}


def test_the_benchmark_request_is_a_permit_at_every_hour_of_a_week() -> None:
    document = parse_policy_document(BENCH_POLICY.read_text(), policy_id="bench")
    policies = PolicySet([compile_policy(document, PolicyRef("bench", 1, document.policy_hash))])
    selected = policies.select("deploy.production")
    assert selected is not None
    request = parse_execute_request(REQUEST, None).evaluation_input()
    monday = datetime(2026, 11, 23, 0, 30, tzinfo=UTC)
    answers = {
        hour: evaluate(selected[1], request, now=monday + timedelta(hours=hour), org={}).outcome
        for hour in range(7 * 24)
    }
    assert {hour: o for hour, o in answers.items() if o is not Outcome.PERMIT} == {}
