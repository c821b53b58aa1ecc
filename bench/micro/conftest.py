"""Shared inputs for the micro benchmarks: a realistic request and generated policies.

Not part of ``make test``: run ``make bench ARGS=--micro`` or
``.venv/bin/pytest bench/micro --benchmark-only``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

# A fixed decision time (Monday 2026-11-23 10:00 UTC): evaluation never reads the clock.
NOW = datetime(2026, 11, 23, 10, 0, 0, 123000, tzinfo=UTC)
ORG_FACTS = {"id": "org_01bench", "plan": "bench"}

# The body bench/wrk/execauth.lua sends.
BODY: dict[str, Any] = {
    "surface": "deploy.production",
    "action": "deploy",
    "actor": "release-bot",
    "context": {"branch": "main", "ticket": "CHG-4821", "pipeline": "gh-actions/1"},
    "payload": {
        "service": "checkout-api",
        "image": "registry.example/checkout-api@sha256:"
        "9f2c1e7ab04d33c5e8f6a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6",
        "replicas": 6,
        "region": "eu-west-1",
        "commit": "4f9d2a1c",
        "canary": True,
        "labels": ["canary", "eu", "tier-1"],
    },
}


def policy_yaml(rules: int) -> str:
    """A deploy.production block of ``rules`` rules; exactly the last one matches (PERMIT).

    The others are the kinds of conditions real policies hold (branch and actor checks,
    service allow-lists, numeric limits, prefixes, and every tenth a comprehension over
    a list), none of which matches the benchmark request, so every rule runs.
    """
    kinds = [
        'deny: context.branch == "hotfix-{i}" && actor != "release-bot"',
        'deny: payload.service == "svc-{i}" && payload.replicas > {n}',
        'permit: actor == "user-{i}" && context.ticket.startsWith("CHG-")',
        'deny: payload.region == "region-{i}" || payload.commit == "bad{i}"',
        'deny: payload.replicas > {big} && context.branch != "main"',
        'permit: context.pipeline.startsWith("jenkins/{i}") && payload.canary == false',
        'deny: payload.image.endsWith(":latest-{i}")',
        'deny: actor.startsWith("intern-{i}") && payload.service in ["svc-a-{i}", "svc-b-{i}"]',
        'permit: size(context.ticket) > 100 && actor == "bot-{i}"',
        'deny: payload.labels.exists(l, l == "frozen-{i}")',
    ]
    lines = [
        "surfaces:",
        "  - match: deploy.production",
        "    require: [context.branch]",
        "    rules:",
    ]
    for i in range(rules - 1):
        rule = kinds[i % len(kinds)].format(i=i, n=i % 20 + 10, big=100 + i)
        effect, _, condition = rule.partition(": ")
        lines.append(f"      - id: r{i}")
        lines.append(f"        {effect}: '{condition}'")
    lines.append("      - id: release-from-main")
    lines.append(
        '        permit: \'context.branch == "main" && actor.startsWith("release-")'
        ' && "ticket" in context && context.ticket.startsWith("CHG-")\''
    )
    return "\n".join(lines) + "\n"


@pytest.fixture
def body() -> dict[str, Any]:
    return {**BODY, "context": dict(BODY["context"]), "payload": dict(BODY["payload"])}
