"""Decision streaming: what the dispatcher delivers, when, and what it never does.

Real sinks: a webhook receiver on a loopback HTTP server, and the NATS JetStream
server of ``EXECAUTH_TEST_NATS_URL`` (set by .ci/run). The dispatcher's turns are run
by the test (``run_once``) with an injected clock, so backoff is tested without waiting.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from execauth.server_secret import ServerSecret
from execauth.serving.runtime import Runtime
from execauth.store.subscriptions import ACTIVE, DEAD_LETTER, Subscription, SubscriptionStore
from execauth.streaming.dispatcher import Dispatcher, DispatchSettings
from execauth.streaming.events import (
    new_webhook_secret,
    seal_webhook_secret,
    verify_webhook,
)
from execauth.tenancy.audit import AuditEvent
from tests.conftest import Tenant, proof, sequence
from tests.streaming.receivers import WebhookReceiver

pytestmark = pytest.mark.anyio
NATS_URL = os.environ.get("EXECAUTH_TEST_NATS_URL")
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
START = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)  # in the past: one test runs on the real clock


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as server:
        yield server


@pytest.fixture
def store(runtime: Runtime) -> SubscriptionStore:
    return SubscriptionStore(runtime.engine)


@pytest.fixture
def server_secret(runtime: Runtime) -> ServerSecret:
    return ServerSecret(runtime.settings.secret_key or "")


async def decide(client: httpx.AsyncClient, tenant: Tenant, count: int) -> list[str]:
    """``count`` decisions, sequenced into the org's log; their receipt ids in log order.

    Log order is not always the order of issue: decisions of one millisecond are placed
    in execution-id order, and a ULID's low bits are random. So each receipt's place is
    read from its inclusion proof.
    """
    receipts = []
    for _ in range(count):
        answer = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
        assert answer.status_code == 200, answer.text
        receipts.append(answer.json()["receipt_id"])
    sequence(client)
    places = {}
    for receipt_id in receipts:
        answer = await proof(client, tenant, receipt_id)
        assert answer.status_code == 200, answer.text
        places[receipt_id] = answer.json()["log_index"]
    return sorted(receipts, key=places.__getitem__)


def subscribe(
    store: SubscriptionStore,
    tenant: Tenant,
    *,
    sink: str,
    target: str,
    server_secret: ServerSecret,
    secret: str | None = None,
    next_index: int = 0,
) -> Subscription:
    subscription_id = "sub_" + secrets.token_hex(8)
    if sink == "webhook" and secret is None:
        secret = new_webhook_secret()  # a test that checks signatures passes its own
    sealed = seal_webhook_secret(server_secret, subscription_id, secret) if secret else None
    subscription = Subscription(
        subscription_id=subscription_id,
        org_id=tenant.org_id,
        name="test",
        sink=sink,
        target=target,
        sealed_secret=sealed,
        state=ACTIVE,
        next_index=next_index,
        delivered=0,
        attempts=0,
        last_error=None,
        next_attempt_at=START,
        created_at=START,
        delivered_at=None,
    )
    audit = AuditEvent(tenant.org_id, START, "test", "subscription.created", subscription_id)
    store.create(subscription, audit)
    return subscription


class Dispatchers:
    """Makes the test's dispatchers and closes their sinks' connections afterwards."""

    def __init__(self, store: SubscriptionStore, server_secret: ServerSecret) -> None:
        self._store = store
        self._secret = server_secret
        self.made: list[Dispatcher] = []

    def __call__(self, clock: Clock | None = None, **settings: Any) -> Dispatcher:
        options = {"nats_url": NATS_URL} | settings
        made = Dispatcher(
            self._store, self._secret, DispatchSettings(**options), clock=clock or Clock()
        )
        self.made.append(made)
        return made


@pytest.fixture
async def dispatcher(
    store: SubscriptionStore, server_secret: ServerSecret
) -> AsyncIterator[Dispatchers]:
    factory = Dispatchers(store, server_secret)
    yield factory
    for made in factory.made:
        await made.close_sinks()


async def test_a_webhook_receives_every_decision_once_in_log_order_signed(
    client: httpx.AsyncClient,
    tenant: Tenant,
    store: SubscriptionStore,
    server_secret: ServerSecret,
    dispatcher: Dispatchers,
    receiver: WebhookReceiver,
) -> None:
    receipts = await decide(client, tenant, 7)
    secret = new_webhook_secret()
    subscribe(
        store,
        tenant,
        sink="webhook",
        target=receiver.url,
        server_secret=server_secret,
        secret=secret,
    )
    clock = Clock()
    worker = dispatcher(clock, batch_size=3)

    assert await worker.run_once() == 7

    events = [e for body in receiver.bodies() for e in json.loads(body)["events"]]
    assert [e["receipt"]["receipt_id"] for e in events] == receipts
    assert [e["log_index"] for e in events] == list(range(7))
    assert [e["id"] for e in events] == [f"{tenant.org_id}:{i}" for i in range(7)]
    assert len(receiver.requests) == 3  # batches of 3, 3 and 1
    for headers, body in receiver.requests:
        assert verify_webhook(secret, headers, body, now=clock.now)
        assert not verify_webhook(new_webhook_secret(), headers, body, now=clock.now)


async def test_nothing_is_delivered_twice_once_acknowledged(
    client: httpx.AsyncClient,
    tenant: Tenant,
    store: SubscriptionStore,
    server_secret: ServerSecret,
    dispatcher: Dispatchers,
    receiver: WebhookReceiver,
) -> None:
    await decide(client, tenant, 2)
    subscribe(
        store,
        tenant,
        sink="webhook",
        target=receiver.url,
        server_secret=server_secret,
    )
    worker = dispatcher()
    assert await worker.run_once() == 2
    assert await worker.run_once() == 0
    await decide(client, tenant, 1)
    assert await worker.run_once() == 1
    events = [e for body in receiver.bodies() for e in json.loads(body)["events"]]
    assert [e["log_index"] for e in events] == [0, 1, 2]


async def test_the_cursor_stays_until_the_sink_acknowledges_and_retries_back_off(
    client: httpx.AsyncClient,
    tenant: Tenant,
    store: SubscriptionStore,
    server_secret: ServerSecret,
    dispatcher: Dispatchers,
    receiver: WebhookReceiver,
) -> None:
    await decide(client, tenant, 4)
    subscription = subscribe(
        store,
        tenant,
        sink="webhook",
        target=receiver.url,
        server_secret=server_secret,
    )
    clock = Clock()
    worker = dispatcher(clock)
    receiver.fail_next(2)

    assert await worker.run_once() == 0
    failed = store.get(tenant.org_id, subscription.subscription_id)
    assert failed is not None
    assert (failed.next_index, failed.attempts, failed.state) == (0, 1, ACTIVE)
    assert failed.next_attempt_at == START + timedelta(seconds=1)
    assert "500" in (failed.last_error or "")

    assert await worker.run_once() == 0  # not due yet: no request at all
    assert receiver.attempts == 1
    clock.now += timedelta(seconds=1)
    assert await worker.run_once() == 0  # the second failure doubles the wait
    second = store.get(tenant.org_id, subscription.subscription_id)
    assert second is not None
    assert second.next_attempt_at == clock.now + timedelta(seconds=2)
    clock.now += timedelta(seconds=2)
    assert await worker.run_once() == 4

    done = store.get(tenant.org_id, subscription.subscription_id)
    assert done is not None
    assert (done.next_index, done.delivered, done.attempts, done.last_error) == (4, 4, 0, None)


async def test_after_the_last_attempt_the_subscription_waits_in_dead_letter_then_resumes(
    client: httpx.AsyncClient,
    tenant: Tenant,
    store: SubscriptionStore,
    server_secret: ServerSecret,
    dispatcher: Dispatchers,
    receiver: WebhookReceiver,
) -> None:
    await decide(client, tenant, 3)
    subscription = subscribe(
        store,
        tenant,
        sink="webhook",
        target=receiver.url,
        server_secret=server_secret,
    )
    clock = Clock()
    worker = dispatcher(clock, max_attempts=2)
    receiver.fail_next(100)
    await worker.run_once()
    clock.now += timedelta(seconds=1)
    await worker.run_once()
    dead = store.get(tenant.org_id, subscription.subscription_id)
    assert dead is not None
    assert (dead.state, dead.next_index) == (DEAD_LETTER, 0)
    clock.now += timedelta(hours=1)
    assert await worker.run_once() == 0  # dead letter is not retried by itself
    assert receiver.attempts == 2

    receiver.fail_next(0)
    audit = AuditEvent(tenant.org_id, clock.now, "test", "subscription.resumed", "x")
    assert store.set_state(tenant.org_id, subscription.subscription_id, ACTIVE, clock.now, audit)
    assert await worker.run_once() == 3
    events = [e for body in receiver.bodies()[-1:] for e in json.loads(body)["events"]]
    assert [e["log_index"] for e in events] == [0, 1, 2]


async def test_a_subscription_can_start_at_a_chosen_point_in_the_log(
    client: httpx.AsyncClient,
    tenant: Tenant,
    store: SubscriptionStore,
    server_secret: ServerSecret,
    dispatcher: Dispatchers,
    receiver: WebhookReceiver,
) -> None:
    await decide(client, tenant, 5)
    subscribe(
        store,
        tenant,
        sink="webhook",
        target=receiver.url,
        server_secret=server_secret,
        next_index=3,
    )
    assert await dispatcher().run_once() == 2
    events = [e for body in receiver.bodies() for e in json.loads(body)["events"]]
    assert [e["log_index"] for e in events] == [3, 4]


async def test_one_subscription_is_delivered_by_one_instance_at_a_time(
    client: httpx.AsyncClient,
    tenant: Tenant,
    store: SubscriptionStore,
    server_secret: ServerSecret,
    dispatcher: Dispatchers,
    receiver: WebhookReceiver,
) -> None:
    await decide(client, tenant, 2)
    subscribe(
        store,
        tenant,
        sink="webhook",
        target=receiver.url,
        server_secret=server_secret,
    )
    clock = Clock()
    first = dispatcher(clock)
    second = dispatcher(clock)
    lease = timedelta(seconds=30)
    assert len(store.claim_due(first.owner, clock.now, lease)) == 1
    assert store.claim_due(second.owner, clock.now, lease) == []
    assert await second.run_once() == 0
    clock.now += lease + timedelta(seconds=1)  # the first instance died: its lease runs out
    assert await second.run_once() == 2


async def test_a_cursor_moved_by_another_instance_is_not_moved_back(
    client: httpx.AsyncClient,
    tenant: Tenant,
    store: SubscriptionStore,
    server_secret: ServerSecret,
) -> None:
    await decide(client, tenant, 3)
    subscription = subscribe(
        store,
        tenant,
        sink="webhook",
        target="http://127.0.0.1:9/",
        server_secret=server_secret,
    )
    lease = timedelta(seconds=30)
    assert store.claim_due("a", START, lease)
    assert store.advance(subscription.subscription_id, "a", 0, 3, START)
    assert not store.advance(subscription.subscription_id, "a", 0, 2, START)  # stale position
    assert not store.advance(subscription.subscription_id, "b", 3, 5, START)  # not its lease
    current = store.get(tenant.org_id, subscription.subscription_id)
    assert current is not None
    assert (current.next_index, current.delivered) == (3, 3)


# --- NATS JetStream ----------------------------------------------------------------------
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


async def jetstream_messages(subject: str) -> list[tuple[str, dict[str, object]]]:
    import nats

    assert NATS_URL
    connection = await nats.connect(NATS_URL)
    try:
        stream = connection.jetstream()
        consumer = await stream.pull_subscribe(subject, durable=None)
        messages = []
        while True:
            try:
                batch = await consumer.fetch(100, timeout=1)
            except TimeoutError:  # nats raises asyncio's, which is this one
                break
            for message in batch:
                headers = message.headers or {}
                messages.append((headers.get("Nats-Msg-Id", ""), json.loads(message.data)))
                await message.ack()
        return messages
    finally:
        await connection.close()


async def test_jetstream_gets_every_decision_in_order_and_drops_redelivered_ones(
    client: httpx.AsyncClient,
    tenant: Tenant,
    store: SubscriptionStore,
    server_secret: ServerSecret,
    dispatcher: Dispatchers,
    jetstream_subject: str,
) -> None:
    receipts = await decide(client, tenant, 5)
    subscription = subscribe(
        store, tenant, sink="nats", target=jetstream_subject, server_secret=server_secret
    )
    clock = Clock()
    worker = dispatcher(clock)
    assert await worker.run_once() == 5
    # As after a crash between the acknowledgement and the cursor's update: again from 0.
    audit = AuditEvent(tenant.org_id, clock.now, "test", "subscription.resumed", "x")
    store.set_state(
        tenant.org_id, subscription.subscription_id, ACTIVE, clock.now, audit, next_index=0
    )
    clock.now += timedelta(seconds=31)  # the lease of the first turn has run out
    assert await worker.run_once() == 5

    messages = await jetstream_messages(jetstream_subject)
    assert [m[0] for m in messages] == [f"{tenant.org_id}:{i}" for i in range(5)]
    assert [m[1]["receipt"]["receipt_id"] for m in messages] == receipts  # type: ignore[index]


async def test_an_unreachable_nats_server_is_a_failed_attempt_not_a_skip(
    client: httpx.AsyncClient,
    tenant: Tenant,
    store: SubscriptionStore,
    server_secret: ServerSecret,
    dispatcher: Dispatchers,
) -> None:
    await decide(client, tenant, 2)
    subscription = subscribe(
        store, tenant, sink="nats", target="execauth.nowhere", server_secret=server_secret
    )
    worker = dispatcher(nats_url="nats://127.0.0.1:9", sink_timeout_seconds=1)
    assert await worker.run_once() == 0
    current = store.get(tenant.org_id, subscription.subscription_id)
    assert current is not None
    assert (current.next_index, current.attempts) == (0, 1)
    assert "NATS" in (current.last_error or "")


async def test_a_sink_that_never_answers_does_not_hold_up_decisions(
    client: httpx.AsyncClient,
    tenant: Tenant,
    store: SubscriptionStore,
    server_secret: ServerSecret,
) -> None:
    await decide(client, tenant, 1)
    with WebhookReceiver(hang=True) as silent:
        subscribe(
            store,
            tenant,
            sink="webhook",
            target=silent.url,
            server_secret=server_secret,
        )
        worker = Dispatcher(
            store,
            server_secret,
            DispatchSettings(poll_interval_seconds=0.01, sink_timeout_seconds=30),
        )
        worker.start()  # its own thread and loop, as in the server
        try:
            assert await asyncio.to_thread(silent.wait_for_request, 10)
            # The sink holds its request; decisions are answered all the same.
            answers = await asyncio.gather(
                *(client.post("/v1/execute", json=PERMIT, headers=tenant.auth) for _ in range(20))
            )
            assert {a.status_code for a in answers} == {200}
        finally:
            silent.release()
            await asyncio.to_thread(worker.stop)
