"""Deterministic replay and impact analysis (docs/policy-language.md)."""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections import Counter
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import yaml
from starlette.applications import Starlette

from execauth.errors import InvalidRequest
from execauth.request import parse_execute_request
from execauth.serving.runtime import Runtime
from execauth.usecases.execute import ExecutionService, Principal
from execauth.usecases.replay import ReplayService
from tests.conftest import ADMIN
from tests.operator.conftest import Operators, make_operators
from tests.policy.generators import (
    COOKBOOK_VOCABULARY,
    cookbook_policies,
    random_body,
    random_now,
)

pytestmark = pytest.mark.anyio

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
DENY = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "dev"}}
SILENCE = {"surface": "deploy.production", "actor": "release-bot"}
STRICTER = """
surfaces:
  - match: deploy.production
    require: [context.branch]
    rules:
      - id: freeze
        deny: "true"
        reason: SERVICE_POLICY_CHANGE_FREEZE
        message: Change freeze
  - match: deploy.staging
    rules:
      - id: anyone
        permit: "true"
"""


async def execute(client: httpx.AsyncClient, ops: Operators, body: object) -> dict[str, str]:
    response = await client.post("/v1/execute", json=body, headers=ops.tenant.auth)
    assert response.status_code == 200, response.text
    receipt: dict[str, str] = response.json()
    return receipt


async def impact_of(client: httpx.AsyncClient, ops: Operators, draft: str) -> dict[str, Any]:
    """The impact report of ``draft`` replacing the tenant's ``deploys`` policy."""
    response = await client.post(
        "/operator/replay", json={"policy": draft, "policy_id": "deploys"}, headers=ops.auditor
    )
    assert response.status_code == 200, response.text
    report: dict[str, Any] = response.json()
    return report


@pytest.mark.parametrize("body", [PERMIT, DENY, SILENCE], ids=["permit", "deny", "silence"])
async def test_replaying_an_execution_reproduces_decision_rule_and_reason(
    client: httpx.AsyncClient, ops: Operators, body: dict[str, object]
) -> None:
    receipt = await execute(client, ops, body)
    response = await client.post(
        f"/operator/executions/{receipt['execution_id']}/replay", headers=ops.admin
    )
    result = response.json()
    assert result["matches"] is True
    assert result["replayed"]["decision"] == receipt["decision"]
    assert result["replayed"]["rule_id"] == receipt["rule_id"]
    assert result["replayed"]["reason"] == receipt.get("reasonCode")


async def test_replay_uses_the_version_that_decided_not_the_latest(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    receipt = await execute(client, ops, PERMIT)
    await client.put(
        f"/console/v1/orgs/{ops.tenant.org_id}/policies/deploys", content=STRICTER, headers=ADMIN
    )
    result = (
        await client.post(
            f"/operator/executions/{receipt['execution_id']}/replay", headers=ops.admin
        )
    ).json()
    assert (result["policy_version"], result["matches"]) == (1, True)
    assert result["replayed"]["decision"] == "PERMIT"


async def test_a_replay_is_recorded_in_the_executions_lineage(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    receipt = await execute(client, ops, PERMIT)
    path = f"/operator/executions/{receipt['execution_id']}"
    await client.post(path + "/replay", headers=ops.admin)
    (event,) = (await client.get(path, headers=ops.auditor)).json()["lineage"]
    assert event["kind"] == "replay"
    assert event["matches"] is True
    assert event["actor"] == f"key:{ops.admin_key_id}"


async def test_an_auditor_cannot_replay_an_execution_because_it_writes_lineage(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    receipt = await execute(client, ops, PERMIT)
    path = f"/operator/executions/{receipt['execution_id']}"
    assert (await client.post(path + "/replay", headers=ops.auditor)).status_code == 403
    assert (await client.get(path, headers=ops.auditor)).json()["lineage"] == []


async def test_replaying_a_range_finds_no_mismatch(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    for body in (PERMIT, DENY, SILENCE, PERMIT):
        await execute(client, ops, body)
    report = (await client.post("/operator/replay", json={}, headers=ops.auditor)).json()
    assert report == {"replayed": 4, "matched": 4, "mismatches": []}


async def test_the_console_replays_a_range_for_the_platform_admin(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    first = await execute(client, ops, PERMIT)
    await execute(client, ops, DENY)
    report = await client.post(
        f"/console/v1/orgs/{ops.tenant.org_id}/replay",
        json={"since": first["timestamp"]},
        headers=ADMIN,
    )
    assert report.json() == {"replayed": 2, "matched": 2, "mismatches": []}


async def test_impact_analysis_shows_the_transition_matrix_with_samples(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    permitted = await execute(client, ops, PERMIT)
    await execute(client, ops, DENY)
    await execute(client, ops, SILENCE)
    report = await impact_of(client, ops, STRICTER)
    assert report["evaluated"] == 3
    assert report["changed"] == 1  # PERMIT→DENY
    assert report["matrix"]["PERMIT"]["DENY"] == 1
    assert report["matrix"]["SILENCE"]["SILENCE"] == 1
    (to_deny,) = report["transitions"]
    assert (to_deny["from"], to_deny["to"], to_deny["count"]) == ("PERMIT", "DENY", 1)
    assert to_deny["samples"][0]["execution_id"] == permitted["execution_id"]
    assert to_deny["samples"][0]["after"]["rule_id"] == "freeze"


async def test_impact_analysis_reports_a_rule_change_apart_from_decision_changes(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    denied = await execute(client, ops, DENY)  # wrong-branch under v1, freeze under the draft
    report = await impact_of(client, ops, STRICTER)
    assert (report["changed"], report["rule_changed"], report["transitions"]) == (0, 1, [])
    (change,) = report["rule_changes"]
    assert (change["decision"], change["count"]) == ("DENY", 1)
    assert change["samples"][0]["execution_id"] == denied["execution_id"]
    assert change["samples"][0]["before"]["reason"] == "SERVICE_POLICY_WRONG_BRANCH"
    assert change["samples"][0]["after"]["reason"] == "SERVICE_POLICY_CHANGE_FREEZE"


async def test_impact_analysis_does_not_publish_the_draft(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    await impact_of(client, ops, STRICTER)
    assert (await execute(client, ops, PERMIT))["decision"] == "PERMIT"


async def test_a_draft_that_governs_no_surface_shows_executions_becoming_ungoverned(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    await execute(client, ops, PERMIT)
    draft = "surfaces:\n  - match: pay.out\n    rules:\n      - id: none\n        deny: 'true'\n"
    report = await impact_of(client, ops, draft)
    assert report["matrix"]["PERMIT"]["UNGOVERNED"] == 1


async def test_an_invalid_draft_is_400_with_the_reason(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    draft = STRICTER.replace('deny: "true"', "deny: '1 +'")
    response = await client.post(
        "/operator/replay", json={"policy": draft, "policy_id": "deploys"}, headers=ops.admin
    )
    assert response.status_code == 400
    assert "freeze" in response.text


async def test_a_draft_sent_as_a_json_object_is_analysed_as_its_text_is(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    await execute(client, ops, PERMIT)
    as_text = await impact_of(client, ops, STRICTER)
    response = await client.post(
        "/operator/replay",
        json={"policy": yaml.safe_load(STRICTER), "policy_id": "deploys"},
        headers=ops.auditor,
    )
    assert response.status_code == 200, response.text
    assert response.json() == as_text


async def test_an_invalid_draft_object_is_400_naming_the_rule(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    document = yaml.safe_load(STRICTER)
    document["surfaces"][0]["rules"][0]["deny"] = "contxt.branch == 'main'"
    response = await client.post(
        "/operator/replay", json={"policy": document, "policy_id": "deploys"}, headers=ops.admin
    )
    assert response.status_code == 400
    (detail,) = response.json()["details"]
    assert detail["rule_id"] == "freeze"
    assert "'contxt'" in detail["reason"]


async def test_impact_names_the_published_version_the_draft_replaces(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    assert (await impact_of(client, ops, STRICTER))["published_version"] == 1


async def test_impact_of_a_draft_whose_id_matches_no_published_policy_says_so(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    response = await client.post(
        "/operator/replay", json={"policy": STRICTER, "policy_id": "deploy"}, headers=ops.auditor
    )
    assert response.json()["published_version"] is None


async def test_replaying_another_orgs_execution_is_404(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    other = await make_operators(client)
    receipt = await execute(client, ops, PERMIT)
    response = await client.post(
        f"/operator/executions/{receipt['execution_id']}/replay", headers=other.admin
    )
    assert response.status_code == 404


# --- 10,000 stored executions replay without a mismatch (the policy issue, item 6) --------

STORED = 10_000
CONCURRENT = 500  # enough for the writer to commit in batches, as under load


async def cookbook_tenant(client: httpx.AsyncClient, plan: str) -> Principal:
    """A new org on ``plan`` with every cookbook policy published; its execute principal."""
    org = await client.post(
        "/console/v1/orgs", json={"name": f"Cookbook {plan}", "plan": plan}, headers=ADMIN
    )
    org_id = org.json()["org_id"]
    for policy_id, text in cookbook_policies().items():
        path = f"/console/v1/orgs/{org_id}/policies/{policy_id}"
        assert (await client.put(path, content=text, headers=ADMIN)).status_code == 201
    key = await client.post(f"/console/v1/orgs/{org_id}/keys", json={"name": "k"}, headers=ADMIN)
    app = client._transport.app  # type: ignore[attr-defined]
    assert isinstance(app, Starlette)
    principal: Principal = await app.state.service.authenticate(f"Bearer {key.json()['api_key']}")
    return principal


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_ten_thousand_stored_executions_replay_without_a_mismatch(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    # Stored the way the gateway stores them: ExecutionService.execute, the batching
    # writer, the real database; each request decided at its own random moment.
    now: contextvars.ContextVar[datetime] = contextvars.ContextVar("now")
    service = ExecutionService(runtime, clock=now.get)
    principals = [await cookbook_tenant(client, plan) for plan in ("free", "standard")]
    rng, start = random.Random(20261123), datetime.now(UTC)

    async def store(principal: Principal, body: dict[str, Any], moment: datetime) -> str:
        now.set(moment)  # a task's own copy of the context
        return (await service.execute(principal, parse_execute_request(body, None))).decision

    decided: Counter[str] = Counter()
    while decided.total() < STORED:
        batch: list[Coroutine[Any, Any, str]] = []
        while len(batch) < min(CONCURRENT, STORED - decided.total()):
            body = random_body(rng, COOKBOOK_VOCABULARY)
            try:
                parse_execute_request(body, None)
            except InvalidRequest:
                continue  # the gateway answers 400: nothing is stored
            batch.append(store(rng.choice(principals), body, random_now(rng, start)))
        decided.update(await asyncio.gather(*batch))

    replays = ReplayService(service)
    results = [await replays.replay_range(p.org.org_id, None, None) for p in principals]
    assert sum(r.replayed for r in results) == STORED
    assert [m for r in results for m in r.mismatches] == []
    assert set(decided) == {"PERMIT", "DENY", "SILENCE"}
