"""Approval events on decision streams: each step typed, with its ``approval`` object.

Real sinks (a loopback webhook receiver, the JetStream server of EXECAUTH_TEST_NATS_URL),
a real database, an app whose clock the test moves; the dispatcher's turns and the expiry
sweep's passes are run by the test.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from execauth.api.app import create_app
from execauth.server_secret import ServerSecret
from execauth.serving.runtime import Runtime
from execauth.store.subscriptions import SubscriptionStore
from execauth.streaming.events import new_webhook_secret, verify_webhook
from execauth.usecases.approval_sweep import ApprovalSweep
from execauth.usecases.execute import ExecutionService
from tests.approvals.conftest import Clock, Org, escalate, make_org, vote
from tests.conftest import ADMIN, sequence
from tests.operator.conftest import make_operators
from tests.streaming.receivers import WebhookReceiver
from tests.streaming.test_dispatcher import Dispatchers, jetstream_messages, subscribe
from tests.web.conftest import Console, secret_of, sign_in

pytestmark = pytest.mark.anyio
NATS_URL = os.environ.get("EXECAUTH_TEST_NATS_URL")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def client(runtime: Runtime, clock: Clock) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(runtime, clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://execauth.test") as c:
            yield c


@pytest.fixture
async def org(client: httpx.AsyncClient) -> Org:
    return await make_org(client)


@pytest.fixture
def store(runtime: Runtime) -> SubscriptionStore:
    return SubscriptionStore(runtime.engine)


@pytest.fixture
def server_secret(runtime: Runtime) -> ServerSecret:
    return ServerSecret(runtime.settings.secret_key or "")


@pytest.fixture
async def dispatcher(
    store: SubscriptionStore, server_secret: ServerSecret
) -> AsyncIterator[Dispatchers]:
    factory = Dispatchers(store, server_secret)
    yield factory
    for made in factory.made:
        await made.close_sinks()


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as server:
        yield server


@pytest.fixture
async def jetstream_subject() -> AsyncIterator[str]:
    if not NATS_URL:
        pytest.skip("NATS tests need EXECAUTH_TEST_NATS_URL (set by .ci/run)")
    import nats

    name = "EXECAUTH_TEST_" + secrets.token_hex(4).upper()
    subject = f"execauth.test.{name.lower()}"
    connection = await nats.connect(NATS_URL)
    stream = connection.jetstream()
    await stream.add_stream(name=name, subjects=[subject], duplicate_window=120.0)
    try:
        yield subject
    finally:
        await stream.delete_stream(name)
        await connection.close()


def service_of(client: httpx.AsyncClient) -> ExecutionService:
    service: ExecutionService = client._transport.app.state.service  # type: ignore[attr-defined]
    return service


def delivered(receiver: WebhookReceiver) -> list[dict[str, Any]]:
    return [e for body in receiver.bodies() for e in json.loads(body)["events"]]


async def silence(client: httpx.AsyncClient, org: Org) -> None:
    """A decision no rule matches: an ordinary ``execauth.decision`` entry.

    The tests move the clock between decisions: the log orders entries by their time.
    """
    answer = await client.post(
        "/v1/execute",
        json={"surface": "deploy.production", "actor": "release-bot", "context": {"env": "dev"}},
        headers=org.requester,
    )
    assert answer.status_code == 200, answer.text


async def test_pending_then_approved_reach_a_webhook_typed_with_the_approval_object(
    client: httpx.AsyncClient,
    org: Org,
    store: SubscriptionStore,
    server_secret: ServerSecret,
    dispatcher: Dispatchers,
    receiver: WebhookReceiver,
) -> None:
    secret = new_webhook_secret()
    subscribe(
        store,
        org.tenant,
        sink="webhook",
        target=receiver.url,
        server_secret=server_secret,
        secret=secret,
    )
    escalation = await escalate(client, org)
    approval_id = escalation["approval_id"]
    sequence(client)
    assert (await vote(client, approval_id, org.approvers[0], actor="alice")).status_code == 200
    sequence(client)

    worker = dispatcher()
    assert await worker.run_once() == 2

    pending, approved = delivered(receiver)
    assert [pending["type"], approved["type"]] == [
        "execauth.approval.pending",
        "execauth.approval.approved",
    ]
    assert pending["receipt"]["receipt_id"] == escalation["receipt_id"]
    assert approved["receipt"]["decision"] == "PERMIT"
    assert pending["approval"] == {
        "approval_id": approval_id,
        "state": "pending",
        "surface": "deploy.production",
        "actor": "release-bot",
        "action": escalation.get("action"),
        "policy_id": escalation["policy_id"],
        "rule_id": "needs-approval",
        "requested_by": org.tenant.key_id,
        "approvers": {"roles": ["admin"], "keys": []},
        "quorum": 1,
        "approvals": 0,
        "votes": [],
        "requested_at": escalation["timestamp"],
        "expires_at": escalation["approval_expires_at"],
        "decided_at": None,
        "escalation_receipt_id": escalation["receipt_id"],
        "follow_url": f"https://execauth.test/v1/approvals/{approval_id}",
        "console_url": f"https://execauth.test/console/approvals/{approval_id}",
    }
    after = approved["approval"]
    assert (after["state"], after["approvals"], after["quorum"]) == ("approved", 1, 1)
    assert [(v["key_id"], v["vote"], v["actor"]) for v in after["votes"]] == [
        (org.ids[0], "approve", "alice")
    ]
    assert after["expires_at"] == escalation["approval_expires_at"]
    assert after["decided_at"] == approved["receipt"]["timestamp"]
    for headers, body in receiver.requests:
        assert verify_webhook(secret, headers, body, now=worker._clock())


async def test_a_rejection_reaches_jetstream_with_the_reason_and_its_deny(
    client: httpx.AsyncClient,
    clock: Clock,
    org: Org,
    store: SubscriptionStore,
    server_secret: ServerSecret,
    dispatcher: Dispatchers,
    jetstream_subject: str,
) -> None:
    subscribe(store, org.tenant, sink="nats", target=jetstream_subject, server_secret=server_secret)
    approval_id = (await escalate(client, org))["approval_id"]
    sequence(client)
    clock.advance(minutes=1)
    refused = await vote(client, approval_id, org.approvers[1], "reject", reason="not on a Friday")
    assert refused.status_code == 200, refused.text
    sequence(client)

    assert await dispatcher().run_once() == 2

    messages = await jetstream_messages(jetstream_subject)
    assert [m["type"] for _, m in messages] == [
        "execauth.approval.pending",
        "execauth.approval.rejected",
    ]
    ids = [msg_id for msg_id, _ in messages]
    assert ids == [f"{org.tenant.org_id}:0", f"{org.tenant.org_id}:1"]
    rejected: Any = messages[1][1]
    assert rejected["receipt"]["decision"] == "DENY"
    assert rejected["approval"]["state"] == "rejected"
    assert [(v["vote"], v["reason"]) for v in rejected["approval"]["votes"]] == [
        ("reject", "not on a Friday")
    ]


async def test_an_approval_nobody_reads_is_expired_by_the_sweep_and_its_event_delivered(
    client: httpx.AsyncClient,
    clock: Clock,
    org: Org,
    store: SubscriptionStore,
    server_secret: ServerSecret,
    dispatcher: Dispatchers,
    receiver: WebhookReceiver,
) -> None:
    subscribe(store, org.tenant, sink="webhook", target=receiver.url, server_secret=server_secret)
    escalation = await escalate(client, org)
    sequence(client)
    service = service_of(client)
    sweep = ApprovalSweep(service.approvals, service.issue_outcome, clock=clock)
    clock.advance(minutes=30)  # approval_ttl: 30m

    assert sweep.run_once().settled == 1
    sequence(client)
    assert await dispatcher().run_once() == 2

    events = delivered(receiver)
    assert [e["type"] for e in events] == ["execauth.approval.pending", "execauth.approval.expired"]
    expired = events[1]
    assert expired["receipt"]["approval_outcome"] == "expired"
    assert expired["receipt"]["decision"] == "DENY"
    assert expired["approval"]["approval_id"] == escalation["approval_id"]
    assert (expired["approval"]["approvals"], expired["approval"]["votes"]) == (0, [])


async def test_a_subscription_for_approvals_only_passes_over_other_decisions(
    client: httpx.AsyncClient,
    clock: Clock,
    org: Org,
    store: SubscriptionStore,
    server_secret: ServerSecret,
    dispatcher: Dispatchers,
    receiver: WebhookReceiver,
) -> None:
    created = await client.post(
        f"/console/v1/orgs/{org.tenant.org_id}/subscriptions",
        json={
            "name": "pager",
            "sink": "webhook",
            "url": receiver.url,
            "start": "beginning",
            "events": ["execauth.approval.*"],
        },
        headers=ADMIN,
    )
    assert created.status_code == 201, created.text
    assert created.json()["events"] == ["execauth.approval.*"]
    await silence(client, org)
    clock.advance(seconds=1)
    approval_id = (await escalate(client, org))["approval_id"]
    clock.advance(seconds=1)
    await silence(client, org)
    sequence(client)

    assert await dispatcher(clock).run_once() == 1  # type: ignore[arg-type]

    assert [(e["type"], e["log_index"]) for e in delivered(receiver)] == [
        ("execauth.approval.pending", 1)
    ]
    assert delivered(receiver)[0]["approval"]["approval_id"] == approval_id
    shown = await client.get(
        f"/console/v1/orgs/{org.tenant.org_id}/subscriptions/{created.json()['subscription_id']}",
        headers=ADMIN,
    )
    # The cursor walked past the filtered-out entries: nothing is left to deliver.
    assert (shown.json()["next_index"], shown.json()["lag"], shown.json()["delivered"]) == (3, 0, 1)


async def test_a_subscription_for_decisions_only_gets_no_approval_steps(
    client: httpx.AsyncClient,
    clock: Clock,
    org: Org,
    dispatcher: Dispatchers,
    receiver: WebhookReceiver,
) -> None:
    created = await client.post(
        f"/console/v1/orgs/{org.tenant.org_id}/subscriptions",
        json={
            "name": "siem",
            "sink": "webhook",
            "url": receiver.url,
            "events": ["execauth.decision"],
        },
        headers=ADMIN,
    )
    assert created.status_code == 201, created.text
    await escalate(client, org)
    clock.advance(seconds=1)
    await silence(client, org)
    sequence(client)

    assert await dispatcher(clock).run_once() == 1  # type: ignore[arg-type]

    assert [(e["type"], e["log_index"]) for e in delivered(receiver)] == [("execauth.decision", 1)]
    assert "approval" not in delivered(receiver)[0]


async def test_a_subscription_without_a_filter_gets_every_event_as_before(
    client: httpx.AsyncClient,
    clock: Clock,
    org: Org,
    store: SubscriptionStore,
    server_secret: ServerSecret,
    dispatcher: Dispatchers,
    receiver: WebhookReceiver,
) -> None:
    subscribe(store, org.tenant, sink="webhook", target=receiver.url, server_secret=server_secret)
    await silence(client, org)
    clock.advance(seconds=1)
    await escalate(client, org)
    sequence(client)

    assert await dispatcher().run_once() == 2

    types = [e["type"] for e in delivered(receiver)]
    assert types == ["execauth.decision", "execauth.approval.pending"]


async def test_an_unknown_event_type_is_refused_with_400(
    client: httpx.AsyncClient, org: Org, receiver: WebhookReceiver
) -> None:
    for events in (["execauth.approval.voted"], [], ["execauth.*"]):
        answer = await client.post(
            f"/console/v1/orgs/{org.tenant.org_id}/subscriptions",
            json={"name": "x", "sink": "webhook", "url": receiver.url, "events": events},
            headers=ADMIN,
        )
        assert answer.status_code == 400, (events, answer.text)


async def test_an_admin_chooses_approval_steps_only_on_the_streams_page(
    client: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    ops = await make_operators(client)
    console = Console(client, ops)
    assert (await sign_in(client, secret_of(ops.admin))).status_code == 303
    made = await client.post(
        "/operator/subscriptions",
        json={"name": "pager", "sink": "webhook", "url": receiver.url},
        headers=ops.admin,
    )
    subscription_id = made.json()["subscription_id"]
    path = f"/console/streams/{subscription_id}/events"

    assert (await console.post(path, {"events": "approvals"})).status_code == 303
    assert (await console.post(path, {"events": "everything"})).status_code == 400

    shown = await client.get(f"/operator/subscriptions/{subscription_id}", headers=ops.admin)
    assert shown.json()["events"] == ["execauth.approval.*"]
    page = await client.get("/console/streams")
    row = page.text.split(f'data-subscription-id="{subscription_id}"')[1]
    assert '<option value="approvals" selected>' in row
