"""Every acknowledged decision reaches the webhook and JetStream, through a receiver outage
and a SIGKILL of the service, and none arrives out of order.

A real ``execauth serve --workers 2`` (the dispatcher runs in its writer process) on
SQLite; clients send decisions with unique idempotency keys and retry a failed one with
the same key, as the SDKs do. Meanwhile the webhook receiver is stopped and restarted on
the same port, and the whole service is SIGKILLed and started again. Then each sink must
hold every receipt a client was answered, at least once, and the first arrival of each
event must follow the log's order. The figures are printed (pytest -s) for docs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_TOKEN
from tests.serving import clean_env, free_port, provision_org, spawn_service
from tests.streaming.receivers import WebhookReceiver

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]
NATS_URL = os.environ.get("EXECAUTH_TEST_NATS_URL")
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
DECISIONS = 600
CLIENTS = 8


@pytest.fixture
async def jetstream() -> AsyncIterator[tuple[str, str]]:
    if not NATS_URL:
        pytest.skip("NATS tests need EXECAUTH_TEST_NATS_URL (set by .ci/run)")
    import nats

    name = "EXECAUTH_E2E_" + secrets.token_hex(4).upper()
    subject = f"execauth.e2e.{name.lower()}"
    connection = await nats.connect(NATS_URL)
    stream = connection.jetstream()
    await stream.add_stream(name=name, subjects=[subject], duplicate_window=300.0)
    try:
        yield name, subject
    finally:
        await stream.delete_stream(name)
        await connection.close()


async def jetstream_events(subject: str) -> list[dict[str, object]]:
    import nats

    assert NATS_URL
    connection = await nats.connect(NATS_URL)
    try:
        consumer = await connection.jetstream().pull_subscribe(subject, durable=None)
        events: list[dict[str, object]] = []
        while True:
            try:
                batch = await consumer.fetch(500, timeout=1)
            except TimeoutError:
                return events
            for message in batch:
                events.append(json.loads(message.data))
                await message.ack()
    finally:
        await connection.close()


def webhook_events(receivers: list[WebhookReceiver]) -> list[dict[str, object]]:
    """Everything the receivers acknowledged, in arrival order (the first one, then its
    replacement on the same port)."""
    return [
        e
        for receiver in receivers
        for body in receiver.bodies()
        for e in json.loads(body)["events"]
    ]


def in_log_order(events: list[dict[str, object]]) -> bool:
    """The first arrival of each event follows the log (a retry may repeat, never reorder)."""
    firsts: list[int] = []
    seen: set[object] = set()
    for event in events:
        if event["id"] not in seen:
            seen.add(event["id"])
            firsts.append(int(str(event["log_index"])))
    return firsts == sorted(firsts)


async def test_every_acknowledged_decision_is_streamed_through_outages_and_a_sigkill(
    tmp_path: Path, jetstream: tuple[str, str]
) -> None:
    _, subject = jetstream
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    (tmp_path / "execauth.toml").write_text(
        "[plans.e2e]\nunmetered = true\nrequests_per_minute = 1000000\n"
    )
    env = clean_env(
        EXECAUTH_DATABASE_URL=f"sqlite:///{tmp_path / 'execauth.db'}",
        EXECAUTH_SECRET_KEY="stream-e2e-secret-" + "k" * 32,
        EXECAUTH_ADMIN_TOKEN=ADMIN_TOKEN,
        EXECAUTH_CONFIG_FILE=str(tmp_path / "execauth.toml"),
        EXECAUTH_NATS_URL=NATS_URL or "",
        EXECAUTH_STREAM_POLL_INTERVAL_SECONDS="0.05",
        EXECAUTH_SEQUENCER_INTERVAL_SECONDS="0.05",
    )
    receivers = [WebhookReceiver().__enter__()]
    process = spawn_service(env, tmp_path, port, workers=2)
    try:
        org_id, _, api_key = provision_org(url, ADMIN_TOKEN, plan="e2e")
        async with (
            httpx.AsyncClient(base_url=url, timeout=10) as http,
            httpx.AsyncClient(
                base_url=f"{url}/console/v1/orgs/{org_id}",
                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                timeout=10,
            ) as console,
        ):
            hook = await console.post(
                "/subscriptions", json={"name": "hook", "sink": "webhook", "url": receivers[0].url}
            )
            assert hook.status_code == 201, hook.text
            bus = await console.post(
                "/subscriptions", json={"name": "bus", "sink": "nats", "subject": subject}
            )
            assert bus.status_code == 201, bus.text
            subscriptions = [hook.json()["subscription_id"], bus.json()["subscription_id"]]

            acknowledged: dict[str, str] = {}  # idempotency key -> receipt id
            quarter, half = asyncio.Event(), asyncio.Event()
            retries = 0
            lag_max = 0

            async def lag() -> int:
                shown = [(await console.get(f"/subscriptions/{s}")).json() for s in subscriptions]
                return max(int(s["lag"]) for s in shown)

            async def client(number: int) -> None:
                nonlocal retries
                for i in range(number, DECISIONS, CLIENTS):
                    key = f"e2e-{i}"
                    while True:
                        try:
                            answer = await http.post(
                                "/v1/execute",
                                json=PERMIT,
                                headers={
                                    "Authorization": f"Bearer {api_key}",
                                    "Idempotency-Key": key,
                                },
                            )
                            if answer.status_code == 200:
                                acknowledged[key] = answer.json()["receipt_id"]
                                break
                        except httpx.TransportError:
                            pass
                        retries += 1
                        await asyncio.sleep(0.2)  # the service is restarting: same key again
                    if len(acknowledged) >= DECISIONS // 4:
                        quarter.set()
                    if len(acknowledged) >= DECISIONS // 2:
                        half.set()

            async def chaos() -> None:
                nonlocal process, lag_max
                await quarter.wait()
                receivers[0].__exit__(None, None, None)  # the webhook's receiver goes away
                await half.wait()
                os.killpg(process.pid, signal.SIGKILL)  # the whole service, writer included
                await asyncio.to_thread(process.wait, 20)
                process = await asyncio.to_thread(spawn_service, env, tmp_path, port, workers=2)
                # The receiver comes back on the same URL.
                receivers.append(WebhookReceiver(port=receivers[0].port).__enter__())
                lag_max = max(lag_max, await lag())

            await asyncio.gather(chaos(), *(client(n) for n in range(CLIENTS)))

            # The receiver's outage put the webhook into backoff (a few seconds here):
            # wait for both sinks to catch up, then compare.
            expected = set(acknowledged.values())
            deadline = time.monotonic() + 90
            while True:
                hook_events = webhook_events(receivers)
                nats_events = await jetstream_events(subject)
                hook_ids = {receipt_id(e) for e in hook_events}
                nats_ids = {receipt_id(e) for e in nats_events}
                caught_up = expected <= hook_ids and expected <= nats_ids
                if caught_up or time.monotonic() > deadline:
                    break
                lag_max = max(lag_max, await lag())
                await asyncio.sleep(1)

        print(
            f"\nstreaming e2e: {len(expected)} acknowledged decisions, {retries} client retries; "
            f"webhook {len(hook_events)} events ({len(hook_events) - len(hook_ids)} duplicates), "
            f"JetStream {len(nats_events)} messages ({len(nats_events) - len(nats_ids)} "
            f"duplicates), max lag seen {lag_max}"
        )
        assert len(expected) == DECISIONS
        assert expected - hook_ids == set()
        assert expected - nats_ids == set()
        assert in_log_order(hook_events)
        assert in_log_order(nats_events)
    finally:
        for receiver in receivers:
            receiver.__exit__(None, None, None)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=40)


def receipt_id(event: dict[str, object]) -> str:
    receipt = event["receipt"]
    assert isinstance(receipt, dict)
    return str(receipt["receipt_id"])
