"""Execution history (the operator surface, docs/api.md): newest first, filters, cursor, lineage."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.operator.conftest import Operators

pytestmark = pytest.mark.anyio

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
DENY = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "dev"}}
STAGING = {"surface": "deploy.staging", "actor": "alice", "payload": {"amount": 2}}


async def execute(client: httpx.AsyncClient, ops: Operators, body: object) -> httpx.Response:
    response = await client.post("/v1/execute", json=body, headers=ops.tenant.auth)
    assert response.status_code == 200, response.text
    return response


async def history(
    client: httpx.AsyncClient, ops: Operators, **params: str | int
) -> dict[str, object]:
    response = await client.get("/operator/executions", params=params, headers=ops.auditor)
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def ids(page: dict[str, object]) -> list[str]:
    rows = page["executions"]
    assert isinstance(rows, list)
    return [row["execution_id"] for row in rows]


async def test_executions_are_listed_newest_first(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    sent = [(await execute(client, ops, PERMIT)).json()["execution_id"] for _ in range(3)]
    # Ids begin with their decision's millisecond; two in the same one are ordered by id.
    assert ids(await history(client, ops)) == sorted(sent, reverse=True)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"decision": "DENY"}, ["deny"]),
        ({"surface": "deploy.staging"}, ["staging"]),
        ({"actor": "alice"}, ["staging"]),
        ({"decision": "PERMIT", "surface": "deploy.production"}, ["permit"]),
    ],
    ids=["decision", "surface", "actor", "combined"],
)
async def test_history_filters_by_surface_decision_and_actor(
    client: httpx.AsyncClient, ops: Operators, params: dict[str, str], expected: list[str]
) -> None:
    made = {
        "permit": (await execute(client, ops, PERMIT)).json()["execution_id"],
        "deny": (await execute(client, ops, DENY)).json()["execution_id"],
        "staging": (await execute(client, ops, STAGING)).json()["execution_id"],
    }
    assert ids(await history(client, ops, **params)) == [made[name] for name in expected]


async def test_history_filters_by_time_range(client: httpx.AsyncClient, ops: Operators) -> None:
    first = (await execute(client, ops, PERMIT)).json()
    await asyncio.sleep(0.01)
    second = (await execute(client, ops, PERMIT)).json()
    assert ids(await history(client, ops, since=second["timestamp"])) == [second["execution_id"]]
    assert ids(await history(client, ops, until=second["timestamp"])) == [first["execution_id"]]


async def test_cursor_pages_neither_repeat_nor_skip_under_concurrent_inserts(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    before = [(await execute(client, ops, PERMIT)).json()["execution_id"] for _ in range(7)]
    seen: list[str] = []
    page = await history(client, ops, limit=3)
    while True:
        seen += ids(page)
        await execute(client, ops, PERMIT)  # arrives between pages
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert isinstance(cursor, str)
        page = await history(client, ops, limit=3, cursor=cursor)
    # Newest first; two executions decided in the same millisecond are ordered by id (its
    # time prefix is the decision's millisecond), not by arrival.
    assert seen == sorted(before, reverse=True)


@pytest.mark.parametrize(
    "params",
    [{"cursor": "not-a-cursor"}, {"decision": "MAYBE"}, {"limit": "0"}, {"since": "yesterday"}],
    ids=["cursor", "decision", "limit", "since"],
)
async def test_bad_history_parameters_are_400(
    client: httpx.AsyncClient, ops: Operators, params: dict[str, str]
) -> None:
    response = await client.get("/operator/executions", params=params, headers=ops.auditor)
    assert response.status_code == 400


async def test_an_execution_shows_its_request_receipt_and_policy_version(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    receipt = (await execute(client, ops, PERMIT)).json()
    response = await client.get(
        f"/operator/executions/{receipt['execution_id']}", headers=ops.auditor
    )
    detail = response.json()
    assert detail["receipt"] == receipt
    assert detail["request"]["context"] == {"branch": "main"}
    assert detail["policy_id"] == "deploys"
    assert detail["policy_version"] == 1
    assert detail["rule_id"] == receipt["rule_id"]
    assert detail["evaluated_at"] == receipt["timestamp"]


async def test_idempotent_repeats_appear_in_the_executions_lineage(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    headers = {**ops.tenant.auth, "Idempotency-Key": "deploy-42"}
    first = await client.post("/v1/execute", json=PERMIT, headers=headers)
    for _ in range(2):
        await client.post("/v1/execute", json=PERMIT, headers=headers)
    detail = (
        await client.get(
            f"/operator/executions/{first.json()['execution_id']}", headers=ops.auditor
        )
    ).json()
    [repeats] = detail["lineage"]  # one entry with a count, not one per repeat
    assert (repeats["kind"], repeats["repeats"]) == ("idempotent_repeat", 2)
    assert len(ids(await history(client, ops))) == 1


async def test_an_unknown_execution_is_404(client: httpx.AsyncClient, ops: Operators) -> None:
    response = await client.get(
        "/operator/executions/service_exec_01J0000000000000000000000", headers=ops.auditor
    )
    assert response.status_code == 404
