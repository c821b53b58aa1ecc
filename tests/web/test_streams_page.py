"""The console's Streams page: subscriptions with lag and state; admins pause and resume."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import sequence
from tests.web.conftest import Console, secret_of, sign_in

pytestmark = pytest.mark.anyio
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
WEBHOOK = {"name": "siem", "sink": "webhook", "url": "https://siem.example/hook"}


async def test_the_streams_page_shows_each_subscription_with_its_lag_and_no_secret(
    console: Console,
) -> None:
    made = await console.client.post(
        "/operator/subscriptions", json=WEBHOOK | {"start": "beginning"}, headers=console.ops.admin
    )
    assert made.status_code == 201, made.text
    for _ in range(2):
        await console.client.post("/v1/execute", json=PERMIT, headers=console.ops.tenant.auth)
    sequence(console.client)
    page = await console.client.get("/console/streams")
    assert page.status_code == 200
    row = page.text.split(f'data-subscription-id="{made.json()["subscription_id"]}"')[1]
    assert "siem" in row
    assert "<td>2</td>" in row  # two decisions in the log, none delivered: lag 2
    assert made.json()["secret"] not in page.text


async def test_an_admin_pauses_and_resumes_a_stream_from_the_page(console: Console) -> None:
    made = await console.client.post(
        "/operator/subscriptions", json=WEBHOOK, headers=console.ops.admin
    )
    subscription_id = made.json()["subscription_id"]
    paused = await console.post(f"/console/streams/{subscription_id}/pause", {})
    assert paused.status_code == 303
    shown = await console.client.get(
        f"/operator/subscriptions/{subscription_id}", headers=console.ops.admin
    )
    assert shown.json()["state"] == "paused"
    resumed = await console.post(f"/console/streams/{subscription_id}/resume", {})
    assert resumed.status_code == 303
    shown = await console.client.get(
        f"/operator/subscriptions/{subscription_id}", headers=console.ops.admin
    )
    assert shown.json()["state"] == "active"


async def test_an_auditor_sees_streams_but_cannot_pause_them(
    client: httpx.AsyncClient, console: Console
) -> None:
    made = await client.post("/operator/subscriptions", json=WEBHOOK, headers=console.ops.admin)
    subscription_id = made.json()["subscription_id"]
    await client.post("/console/logout", data={"csrf_token": await console.csrf()})
    client.cookies.clear()
    assert (await sign_in(client, secret_of(console.ops.auditor))).status_code == 303
    page = await client.get("/console/streams")
    assert page.status_code == 200
    assert f"/console/streams/{subscription_id}/pause" not in page.text
    refused = await client.post(
        f"/console/streams/{subscription_id}/pause",
        data={"csrf_token": await console.csrf("/console/streams")},
    )
    assert refused.status_code == 403
