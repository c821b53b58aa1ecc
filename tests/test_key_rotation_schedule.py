"""Automatic key rotation (docs/operations.md): the schedule, the handover, one per period.

Time is injected everywhere: the schedule and the keyring take ``now``, the app takes a
clock the test moves; nothing waits for 90 days.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx
import pytest
from pydantic import ValidationError

from execauth.api.app import create_app
from execauth.config import Settings
from execauth.errors import SigningUnavailable
from execauth.keyring import (
    ROTATION_OVERLAP,
    SERVICE_ACTOR,
    RotationSchedule,
    SigningKeyRecord,
    due_rotation,
    generate_signing_key,
    key_list_document,
    next_signing_change,
)
from execauth.server_secret import ServerSecret
from execauth.serving.runtime import Runtime, bootstrap, open_runtime
from execauth.wire_time import format_timestamp
from tests.conftest import Database, make_tenant

SCHEDULE = RotationSchedule(period=timedelta(days=90), overlap=timedelta(days=7))
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SECRET = ServerSecret("r" * 40)
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


def _key(created_at: datetime, **changes: Any) -> SigningKeyRecord:
    return dataclasses.replace(generate_signing_key(SECRET, created_at), **changes)


# --- the schedule (pure) ---------------------------------------------------------------------


def test_rotation_is_not_due_before_period_minus_overlap() -> None:
    key = _key(T0)
    assert (
        due_rotation([key], T0 + timedelta(days=83) - timedelta(milliseconds=1), SCHEDULE) is None
    )


def test_rotation_is_due_an_overlap_before_the_period_ends_and_hands_over_at_its_end() -> None:
    key = _key(T0)
    due = due_rotation([key], T0 + timedelta(days=83), SCHEDULE)
    assert due is not None
    assert due.current_key_id == key.key_id
    assert due.hands_over_at == T0 + timedelta(days=90)


def test_overdue_rotation_still_publishes_the_successor_a_full_overlap_ahead() -> None:
    # The service was down at the due time: no successor may sign before clients saw it.
    key = _key(T0)
    now = T0 + timedelta(days=120)
    due = due_rotation([key], now, SCHEDULE)
    assert due is not None
    assert due.hands_over_at == now + timedelta(days=7)


def test_after_a_rotation_the_next_one_is_due_a_period_after_the_successor_starts() -> None:
    handover = T0 + timedelta(days=90)
    old = _key(T0, retired_at=handover)
    successor = _key(handover)
    assert due_rotation([old, successor], T0 + timedelta(days=100), SCHEDULE) is None
    due = due_rotation([old, successor], handover + timedelta(days=83), SCHEDULE)
    assert due is not None
    assert due.current_key_id == successor.key_id


def test_no_rotation_is_due_when_every_key_is_retired_or_revoked() -> None:
    keys = [_key(T0, retired_at=T0 + timedelta(days=1)), _key(T0, revoked_at=T0)]
    assert due_rotation(keys, T0 + timedelta(days=365), SCHEDULE) is None


def test_next_signing_change_is_the_nearest_window_edge_of_an_unrevoked_key() -> None:
    handover = T0 + timedelta(days=90)
    keys = [
        _key(T0, retired_at=handover),
        _key(handover),
        _key(T0 + timedelta(days=1), revoked_at=T0 + timedelta(days=2)),
    ]
    assert next_signing_change(keys, T0 + timedelta(days=10)) == handover
    assert next_signing_change(keys, handover) is None


# --- configuration ---------------------------------------------------------------------------


def test_rotation_is_on_by_default_every_90_days_with_a_7_day_overlap() -> None:
    assert Settings().rotation_schedule() == SCHEDULE


def test_rotation_period_off_disables_rotation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXECAUTH_KEY_ROTATION_PERIOD", "off")
    assert Settings().rotation_schedule() is None


def test_rotation_durations_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXECAUTH_KEY_ROTATION_PERIOD", "30d")
    monkeypatch.setenv("EXECAUTH_KEY_ROTATION_OVERLAP", "P2D")
    assert Settings().rotation_schedule() == RotationSchedule(timedelta(days=30), timedelta(days=2))


def test_rotation_overlap_shorter_than_the_key_list_cache_ttl_is_refused() -> None:
    with pytest.raises(ValidationError, match="key_rotation_overlap"):
        Settings(key_rotation_overlap=timedelta(minutes=59))


def test_rotation_period_not_longer_than_the_overlap_is_refused() -> None:
    with pytest.raises(ValidationError, match="key_rotation_period"):
        Settings(key_rotation_period=timedelta(days=7), key_rotation_overlap=timedelta(days=7))


# --- rotating a real keyring -----------------------------------------------------------------


def _only_key(runtime: Runtime) -> SigningKeyRecord:
    (key,) = runtime.keyring.records
    return key


def test_scheduled_rotation_publishes_the_successor_before_it_signs(runtime: Runtime) -> None:
    first = _only_key(runtime)
    runtime.follow_signing_keys(first.created_at + timedelta(days=83))
    listed = key_list_document(runtime.keyring.records, "https://execauth.test")["keys"]
    old, new = listed
    handover = format_timestamp(first.created_at + timedelta(days=90))
    assert old["key_id"] == first.key_id
    assert (old["status"], old["expires_at"]) == ("active", handover)
    assert (new["status"], new["created_at"]) == ("active", handover)
    assert "expires_at" not in new
    assert runtime.keyring.signer(first.created_at + timedelta(days=83)).key_id == first.key_id


def test_signer_hands_over_at_the_successors_start_without_a_refresh(runtime: Runtime) -> None:
    first = _only_key(runtime)
    runtime.follow_signing_keys(first.created_at + timedelta(days=83))
    successor = runtime.keyring.records[-1]
    before = successor.created_at - timedelta(milliseconds=1)
    assert runtime.keyring.signer(before).key_id == first.key_id
    assert runtime.keyring.signer(successor.created_at).key_id == successor.key_id


def test_rotation_is_not_repeated_within_the_period(runtime: Runtime) -> None:
    first = _only_key(runtime)
    for days in (83, 84, 90, 100):
        runtime.follow_signing_keys(first.created_at + timedelta(days=days))
    assert len(runtime.signing_keys.all_keys()) == 2


def test_rotation_off_never_rotates(settings: Settings, database: Database) -> None:
    quiet = settings.model_copy(update={"key_rotation_period": None})
    runtime = bootstrap(quiet, schema=database.schema)
    try:
        first = _only_key(runtime)
        runtime.follow_signing_keys(first.created_at + timedelta(days=400))
        assert [k.key_id for k in runtime.signing_keys.all_keys()] == [first.key_id]
    finally:
        runtime.stop()


def test_scheduled_rotation_is_in_the_audit_trail_as_done_by_the_service(
    runtime: Runtime,
) -> None:
    first = _only_key(runtime)
    runtime.follow_signing_keys(first.created_at + timedelta(days=83))
    successor = runtime.keyring.records[-1]
    (event,) = [e for e in runtime.audit.page(None, limit=50) if e.action == "signing_key.rotated"]
    assert (event.actor, event.target) == (SERVICE_ACTOR, successor.key_id)
    assert event.details["scheduled"] is True
    assert event.details["retiring"] == [first.key_id]
    assert event.details["signs_from"] == successor.created_at.isoformat()


def test_rotating_by_hand_during_the_overlap_supersedes_the_scheduled_successor(
    runtime: Runtime,
) -> None:
    first = _only_key(runtime)
    runtime.follow_signing_keys(first.created_at + timedelta(days=83))
    at = first.created_at + timedelta(days=84)
    manual = generate_signing_key(runtime.secret, at)
    runtime.signing_keys.rotate(manual, at + ROTATION_OVERLAP, "test", now=at)
    runtime.keyring.refresh(at)
    assert runtime.keyring.signer(first.created_at + timedelta(days=90)).key_id == manual.key_id
    assert due_rotation(runtime.keyring.records, at + timedelta(days=82), SCHEDULE) is None
    due = due_rotation(runtime.keyring.records, at + timedelta(days=83), SCHEDULE)
    assert due is not None
    assert due.current_key_id == manual.key_id


def test_successor_that_cannot_be_opened_stops_signing_at_the_handover(runtime: Runtime) -> None:
    # Sealed under another server secret (a misconfigured instance rotated): this
    # instance must neither fail its refresh now nor sign on with the ended key later.
    first = _only_key(runtime)
    now = first.created_at + timedelta(days=83)
    due = due_rotation([first], now, SCHEDULE)
    assert due is not None
    foreign = generate_signing_key(ServerSecret("f" * 40), due.hands_over_at)
    assert runtime.signing_keys.rotate_on_schedule(due, foreign, now, "test")
    runtime.keyring.refresh(now)
    assert runtime.keyring.signer(now).key_id == first.key_id
    with pytest.raises(SigningUnavailable):
        runtime.keyring.signer(due.hands_over_at)


@pytest.fixture
def second_instance(runtime: Runtime, settings: Settings, database: Database) -> Iterator[Runtime]:
    """Another process's runtime over the same database (its own engine and keyring)."""
    other = open_runtime(settings, schema=database.schema)
    yield other
    other.stop()


def test_instances_finding_the_rotation_due_together_rotate_once(
    runtime: Runtime, second_instance: Runtime
) -> None:
    first = _only_key(runtime)
    now = first.created_at + timedelta(days=83)
    runtime.keyring.refresh(now)
    second_instance.keyring.refresh(now)
    start = threading.Barrier(2)
    results: list[SigningKeyRecord | None] = []

    def rotate(instance: Runtime) -> None:
        start.wait()
        results.append(instance.keyring.rotate_if_due(now, SCHEDULE))

    threads = [threading.Thread(target=rotate, args=(rt,)) for rt in (runtime, second_instance)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(result is not None for result in results) == 1
    assert len(runtime.signing_keys.all_keys()) == 2
    rotations = [e for e in runtime.audit.page(None, limit=50) if e.action == "signing_key.rotated"]
    assert len(rotations) == 1


def test_an_instance_that_lost_the_rotation_signs_with_the_winners_successor(
    runtime: Runtime, second_instance: Runtime
) -> None:
    first = _only_key(runtime)
    now = first.created_at + timedelta(days=83)
    second_instance.keyring.refresh(now)
    runtime.follow_signing_keys(now)
    second_instance.follow_signing_keys(now)
    handover = first.created_at + timedelta(days=90)
    assert second_instance.keyring.signer(handover).key_id == runtime.keyring.records[-1].key_id
    assert len(second_instance.signing_keys.all_keys()) == 2


# --- through the app, on its injected clock --------------------------------------------------


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def fast_runtime(settings: Settings, database: Database) -> Iterator[Runtime]:
    """A runtime whose refresh loop ticks every 10 ms, so the test waits little."""
    runtime = bootstrap(
        settings.model_copy(update={"refresh_interval_seconds": 0.01}), schema=database.schema
    )
    yield runtime
    runtime.stop()


@pytest.fixture
def clock(fast_runtime: Runtime) -> Clock:
    return Clock(_only_key(fast_runtime).created_at + timedelta(minutes=1))


@pytest.fixture
async def client(fast_runtime: Runtime, clock: Clock) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(fast_runtime, clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://execauth.test") as c:
            yield c


async def _listed_keys(client: httpx.AsyncClient, count: int) -> list[dict[str, Any]]:
    """The published key list once it has ``count`` keys (the refresh loop runs every 10 ms)."""
    with anyio.fail_after(10):
        while True:
            keys: list[dict[str, Any]] = (
                await client.get("/.well-known/service-keys.json")
            ).json()["keys"]
            if len(keys) == count:
                return keys
            await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_app_rotates_by_itself_when_its_clock_reaches_the_due_time(
    client: httpx.AsyncClient, fast_runtime: Runtime, clock: Clock
) -> None:
    first = _only_key(fast_runtime)
    clock.now = first.created_at + timedelta(days=83)
    old, new = await _listed_keys(client, 2)
    assert old["expires_at"] == new["created_at"]
    assert new["created_at"] == format_timestamp(first.created_at + timedelta(days=90))


@pytest.mark.anyio
async def test_receipts_from_both_sides_of_a_scheduled_handover_verify(
    client: httpx.AsyncClient, fast_runtime: Runtime, clock: Clock
) -> None:
    tenant = await make_tenant(client)
    first = _only_key(fast_runtime)
    clock.now = first.created_at + timedelta(days=83)
    _, new = await _listed_keys(client, 2)
    before = (await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)).json()
    clock.now = first.created_at + timedelta(days=90)
    after = (await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)).json()
    assert (before["key_id"], after["key_id"]) == (first.key_id, new["key_id"])
    for receipt in (before, after):
        verdict = (await client.post("/protocol/verify-signature", json=receipt)).json()
        assert verdict["reason"] == "valid"
