"""The benchmark's policy (bench/policy.yaml) permits the benchmark's request at any time.

``make bench`` refuses to measure unless its request is a PERMIT. A rule that reads the
clock and matches at some hours of the week (it once froze Friday afternoons) makes the
benchmark fail then, and measure something else if the check were skipped.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from execauth.policy.decision import Outcome, PolicyRef
from execauth.policy.document import parse_policy_document
from execauth.policy.engine import PolicySet, compile_policy, evaluate
from execauth.request import parse_execute_request
from tests.module_files import load_module_file

BENCH = Path(__file__).parents[2] / "bench"


def bench_request() -> dict[str, Any]:
    """The body ``bench/run.py`` checks before it measures (what execauth.lua sends)."""
    run = load_module_file("bench_run", BENCH / "run.py")
    body: dict[str, Any] = json.loads(run.wrk_body_sample())
    return body


def test_the_benchmark_request_is_a_permit_at_every_hour_of_a_week() -> None:
    document = parse_policy_document((BENCH / "policy.yaml").read_text(), policy_id="bench")
    policies = PolicySet([compile_policy(document, PolicyRef("bench", 1, document.policy_hash))])
    selected = policies.select("deploy.production")
    assert selected is not None
    request = parse_execute_request(bench_request(), None).evaluation_input()
    monday = datetime(2026, 11, 23, 0, 30, tzinfo=UTC)
    answers = {
        hour: evaluate(selected[1], request, now=monday + timedelta(hours=hour), org={}).outcome
        for hour in range(7 * 24)
    }
    assert {hour: o for hour, o in answers.items() if o is not Outcome.PERMIT} == {}
