"""Subscriptions over the operator and console APIs: who may do what, and what is shown."""

from __future__ import annotations

import httpx
import pytest

from execauth.config import Settings
from tests.conftest import ADMIN, sequence
from tests.operator.conftest import Operators, make_operators

pytestmark = pytest.mark.anyio
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
WEBHOOK = {"name": "siem", "sink": "webhook", "url": "https://siem.example/hooks/execauth"}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"nats_url": "nats://127.0.0.1:4222"})


@pytest.fixture
async def ops(client: httpx.AsyncClient) -> Operators:
    return await make_operators(client)


async def test_an_admin_key_creates_a_webhook_and_gets_its_secret_once(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    created = await client.post("/operator/subscriptions", json=WEBHOOK, headers=ops.admin)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["secret"].startswith("whsec_")
    assert (body["state"], body["sink"], body["lag"]) == ("active", "webhook", 0)
    shown = await client.get(
        f"/operator/subscriptions/{body['subscription_id']}", headers=ops.auditor
    )
    assert shown.status_code == 200
    assert "secret" not in shown.json()
    listed = await client.get("/operator/subscriptions", headers=ops.auditor)
    assert [s["subscription_id"] for s in listed.json()["subscriptions"]] == [
        body["subscription_id"]
    ]
    assert "secret" not in listed.json()["subscriptions"][0]


async def test_auditors_read_but_cannot_change_subscriptions(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    refused = await client.post("/operator/subscriptions", json=WEBHOOK, headers=ops.auditor)
    assert refused.status_code == 403
    made = await client.post("/operator/subscriptions", json=WEBHOOK, headers=ops.admin)
    path = f"/operator/subscriptions/{made.json()['subscription_id']}"
    assert (await client.delete(path, headers=ops.auditor)).status_code == 403
    assert (await client.post(path + "/pause", headers=ops.auditor)).status_code == 403


async def test_execute_keys_have_no_access_to_subscriptions(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    answer = await client.get("/operator/subscriptions", headers=ops.tenant.auth)
    assert answer.status_code == 403


async def test_start_now_skips_what_the_log_already_holds_and_lag_counts_what_follows(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    for _ in range(3):
        await client.post("/v1/execute", json=PERMIT, headers=ops.tenant.auth)
    sequence(client)
    now = await client.post("/operator/subscriptions", json=WEBHOOK, headers=ops.admin)
    beginning = await client.post(
        "/operator/subscriptions", json=WEBHOOK | {"start": "beginning"}, headers=ops.admin
    )
    at_two = await client.post(
        "/operator/subscriptions", json=WEBHOOK | {"start": 2}, headers=ops.admin
    )
    assert [r.json()["next_index"] for r in (now, beginning, at_two)] == [3, 0, 2]
    assert [r.json()["lag"] for r in (now, beginning, at_two)] == [0, 3, 1]
    await client.post("/v1/execute", json=PERMIT, headers=ops.tenant.auth)
    sequence(client)
    shown = await client.get(
        f"/operator/subscriptions/{now.json()['subscription_id']}", headers=ops.admin
    )
    assert shown.json()["lag"] == 1


@pytest.mark.parametrize(
    "body",
    [
        {"name": "x", "sink": "kafka", "url": "https://a.example/"},
        {"name": "x", "sink": "webhook"},
        {"name": "x", "sink": "webhook", "url": "ftp://a.example/"},
        {"name": "x", "sink": "webhook", "url": "/relative"},
        {"name": "x", "sink": "webhook", "url": "https://a.example/", "subject": "a.b"},
        {"name": "x", "sink": "nats", "subject": "decisions.>"},
        {"name": "x", "sink": "nats", "subject": "has space"},
        {"name": "x", "sink": "nats"},
        {"name": "x", "sink": "webhook", "url": "https://a.example/", "start": "tomorrow"},
        {"name": "x", "sink": "webhook", "url": "https://a.example/", "start": -1},
        {"name": "x", "sink": "webhook", "url": "https://a.example/", "start": 10**30},
        {"name": "x\u0000", "sink": "webhook", "url": "https://a.example/"},
    ],
)
async def test_a_subscription_that_cannot_work_is_refused_with_400(
    client: httpx.AsyncClient, ops: Operators, body: dict[str, object]
) -> None:
    answer = await client.post("/operator/subscriptions", json=body, headers=ops.admin)
    assert answer.status_code == 400, answer.text


async def test_pause_and_resume_from_a_chosen_index_are_audited(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    made = await client.post("/operator/subscriptions", json=WEBHOOK, headers=ops.admin)
    path = f"/operator/subscriptions/{made.json()['subscription_id']}"
    paused = await client.post(path + "/pause", headers=ops.admin)
    assert paused.json()["state"] == "paused"
    resumed = await client.post(path + "/resume", json={"start": 0}, headers=ops.admin)
    assert (resumed.json()["state"], resumed.json()["next_index"]) == ("active", 0)
    trail = await client.get("/operator/audit", headers=ops.auditor)
    actions = [e["action"] for e in trail.json()["events"]]
    for action in ("subscription.created", "subscription.paused", "subscription.resumed"):
        assert action in actions
    assert (await client.delete(path, headers=ops.admin)).status_code == 204
    assert (await client.get(path, headers=ops.admin)).status_code == 404


async def test_another_organizations_subscription_is_not_found(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    made = await client.post("/operator/subscriptions", json=WEBHOOK, headers=ops.admin)
    other = await make_operators(client)
    path = f"/operator/subscriptions/{made.json()['subscription_id']}"
    assert (await client.get(path, headers=other.admin)).status_code == 404
    assert (await client.delete(path, headers=other.admin)).status_code == 404
    assert (await client.post(path + "/resume", headers=other.admin)).status_code == 404


async def test_the_platform_admin_manages_an_organizations_subscriptions(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    base = f"/console/v1/orgs/{ops.tenant.org_id}/subscriptions"
    made = await client.post(
        base, json={"name": "bus", "sink": "nats", "subject": "execauth.decisions"}, headers=ADMIN
    )
    assert made.status_code == 201, made.text
    assert "secret" not in made.json()
    listed = await client.get(base, headers=ADMIN)
    assert [s["target"] for s in listed.json()["subscriptions"]] == ["execauth.decisions"]
    assert (await client.get(base, headers=ops.admin)).status_code == 401


async def test_metrics_show_each_subscriptions_lag_and_deliveries(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    made = await client.post(
        "/operator/subscriptions", json=WEBHOOK | {"start": "beginning"}, headers=ops.admin
    )
    for _ in range(3):
        await client.post("/v1/execute", json=PERMIT, headers=ops.tenant.auth)
    sequence(client)
    exposition = (await client.get("/metrics")).text
    labels = (
        f'org_id="{ops.tenant.org_id}",sink="webhook",state="active",'
        f'subscription_id="{made.json()["subscription_id"]}"'
    )
    assert f"execauth_stream_lag_entries{{{labels}}} 3.0" in exposition
    assert f"execauth_stream_delivered_total{{{labels}}} 0.0" in exposition
