"""Deterministic replay and impact analysis (DESIGN.md §5; the policy issue, items 6 and 7)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import ADMIN
from tests.operator.conftest import Operators, make_operators

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
        f"/operator/executions/{receipt['execution_id']}/replay", headers=ops.auditor
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
            f"/operator/executions/{receipt['execution_id']}/replay", headers=ops.auditor
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


async def test_replaying_another_orgs_execution_is_404(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    other = await make_operators(client)
    receipt = await execute(client, ops, PERMIT)
    response = await client.post(
        f"/operator/executions/{receipt['execution_id']}/replay", headers=other.admin
    )
    assert response.status_code == 404
