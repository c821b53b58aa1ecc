"""``ExecutionService`` driven as plain calls: no app, no HTTP, a runtime on a SQLite file.

The organization, its key and its policy are made through ``ControlPlane``, the use case
the console calls; the executes through ``ExecutionService.execute``, the one the gateway
calls. What is checked is read back from the database through a connection of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
import pytest
from sqlalchemy import select

from execauth.config import PlanSettings, Settings
from execauth.errors import (
    Forbidden,
    IdempotencyConflict,
    QuotaExceeded,
    ServiceUnavailable,
    SurfaceNotFound,
    Unauthorized,
)
from execauth.keyring import key_list_document
from execauth.receipts import RECEIPT_ID_DRAWS, new_receipt_id
from execauth.request import ExecuteRequest, parse_execute_request
from execauth.serving.runtime import Runtime, bootstrap
from execauth.serving.write_path import ReceiptSink
from execauth.store.database import make_engine
from execauth.store.executions import ExecutionRecord, PriorExecution, Repeat
from execauth.store.tables import executions
from execauth.tenancy.api_keys import generate_secret, hash_secret
from execauth.tenancy.audit import PLATFORM_ADMIN
from execauth.tenancy.quota import QuotaCheck, UsedUpQuotas
from execauth.usecases.control_plane import ControlPlane
from execauth.usecases.execute import ExecuteResult, ExecutionService, Principal
from execauth.usecases.recent_decisions import RecentDecisions
from execauth.verify import Verdict, parse_key_list, verify_receipt
from tests.conftest import DEPLOY_POLICY, Database, HandMovedClock, small_plans

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database", ["sqlite"], indirect=True)]

FREE_EXECUTES = 2


@pytest.fixture
def plans() -> dict[str, PlanSettings]:
    return small_plans(free_executes=FREE_EXECUTES)


@pytest.fixture
def runtime(settings: Settings, database: Database) -> Iterator[Runtime]:
    """The conftest's runtime, with its writer started as the app's lifespan would."""
    rt = bootstrap(settings, schema=database.schema)
    rt.start()
    yield rt
    rt.stop()


@dataclass(frozen=True)
class Caller:
    service: ExecutionService
    principal: Principal
    secret: str  # the key's bearer secret


@pytest.fixture
async def caller(runtime: Runtime) -> AsyncIterator[Caller]:
    """An org on the small free plan with an execute key and DEPLOY_POLICY, all without HTTP."""
    service = ExecutionService(runtime)
    plane = ControlPlane(service)
    org = await plane.create_org("Acme", "free", "a", actor=PLATFORM_ADMIN)
    _key, secret = await plane.issue_key(
        org.org_id, name="ci", role="execute", surfaces=None, expires_at=None, actor=PLATFORM_ADMIN
    )
    await plane.publish_policy(org.org_id, "deploys", DEPLOY_POLICY, actor=PLATFORM_ADMIN)
    yield Caller(service, await service.authenticate(f"Bearer {secret}"), secret)
    service.rate_limiter.close()


def staging_deploy(idempotency_key: str | None = None) -> ExecuteRequest:
    """A request DEPLOY_POLICY permits (deploy.staging, rule ``anyone``)."""
    body = {"surface": "deploy.staging", "action": "deploy", "actor": "release-bot",
            "payload": {"amount": 2}}  # fmt: skip
    return parse_execute_request(body, idempotency_key)


def stored(runtime: Runtime, org_id: str) -> dict[str, bytes]:
    """The org's stored receipts by receipt id, read on an engine of the test's own."""
    engine = make_engine(runtime.settings.database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(executions.c.receipt_id, executions.c.receipt).where(
                    executions.c.org_id == org_id
                )
            ).all()
    finally:
        engine.dispose()
    return {receipt_id: bytes(receipt) for receipt_id, receipt in rows}


async def test_a_permit_is_stored_before_it_is_returned(caller: Caller, runtime: Runtime) -> None:
    result = await caller.service.execute(caller.principal, staging_deploy())

    receipt = msgspec.json.decode(result.receipt)
    assert result.decision == receipt["decision"] == "PERMIT"
    # Read the moment execute returned, on another connection: the very bytes answered.
    assert stored(runtime, caller.principal.org.org_id) == {receipt["receipt_id"]: result.receipt}


async def test_no_permit_is_returned_when_the_writer_cannot_store_it(
    caller: Caller, runtime: Runtime
) -> None:
    runtime.stop()  # the writer no longer accepts records

    with pytest.raises(ServiceUnavailable):
        await caller.service.execute(caller.principal, staging_deploy())


async def test_a_repeat_returns_the_same_receipt(caller: Caller, runtime: Runtime) -> None:
    first = await caller.service.execute(caller.principal, staging_deploy("deploy-42"))
    again = await caller.service.execute(caller.principal, staging_deploy("deploy-42"))

    assert (first.repeated, again.repeated) == (False, True)
    assert again.receipt == first.receipt
    assert list(stored(runtime, caller.principal.org.org_id).values()) == [first.receipt]


async def test_an_exhausted_quota_raises_quota_exceeded_and_stores_nothing(
    caller: Caller, runtime: Runtime
) -> None:
    org_id = caller.principal.org.org_id
    for _ in range(FREE_EXECUTES):
        await caller.service.execute(caller.principal, staging_deploy())
    before = stored(runtime, org_id)

    with pytest.raises(QuotaExceeded):
        await caller.service.execute(caller.principal, staging_deploy())

    assert len(before) == FREE_EXECUTES
    assert stored(runtime, org_id) == before


# --- receipt ids that meet (receipts.new_receipt_id: 22 random bits a millisecond) -------
class TakenFirst:
    """Receipt ids: ``taken`` for the first ``times`` draws, then newly drawn ones."""

    def __init__(self, taken: str, times: int) -> None:
        self.taken, self.times, self.draws = taken, times, 0

    def __call__(self, now: datetime) -> str:
        self.draws += 1
        return self.taken if self.draws <= self.times else new_receipt_id(now)


async def execute_drawing(
    runtime: Runtime, caller: Caller, ids: TakenFirst, request: ExecuteRequest
) -> ExecuteResult:
    service = ExecutionService(runtime, receipt_ids=ids)
    try:
        return await service.execute(caller.principal, request)
    finally:
        service.rate_limiter.close()


def verdict(runtime: Runtime, receipt: dict[str, Any]) -> Verdict:
    """The offline verifier's verdict on ``receipt``, as of its own timestamp."""
    keys, issuer = parse_key_list(
        key_list_document(runtime.keyring.records, runtime.settings.issuer)
    )
    issued = datetime.fromisoformat(receipt["timestamp"])
    return verify_receipt(receipt, keys, now=issued, issuer=issuer)


async def test_a_decision_whose_receipt_id_is_taken_is_signed_again_under_a_new_one(
    caller: Caller, runtime: Runtime
) -> None:
    first = await caller.service.execute(caller.principal, staging_deploy())
    taken = msgspec.json.decode(first.receipt)["receipt_id"]
    ids = TakenFirst(taken, times=1)

    result = await execute_drawing(runtime, caller, ids, staging_deploy("deploy-9"))

    receipt = msgspec.json.decode(result.receipt)
    assert (result.decision, ids.draws) == ("PERMIT", 2)
    assert receipt["receipt_id"] != taken
    assert verdict(runtime, receipt).reason == "valid"
    assert stored(runtime, caller.principal.org.org_id) == {
        taken: first.receipt,
        receipt["receipt_id"]: result.receipt,
    }


async def test_no_receipt_is_returned_when_every_receipt_id_drawn_is_taken(
    caller: Caller, runtime: Runtime
) -> None:
    first = await caller.service.execute(caller.principal, staging_deploy())
    taken = msgspec.json.decode(first.receipt)["receipt_id"]
    ids = TakenFirst(taken, times=RECEIPT_ID_DRAWS)

    with pytest.raises(ServiceUnavailable):  # a 503 to the client, never a PERMIT
        await execute_drawing(runtime, caller, ids, staging_deploy("deploy-10"))

    assert ids.draws == RECEIPT_ID_DRAWS
    assert stored(runtime, caller.principal.org.org_id) == {taken: first.receipt}


# --- repeats answered from memory (usecases/recent_decisions.py) -----------------------
class WatchedSink:
    """The runtime's real sink, noting what it is handed: records to store, repeats to count."""

    def __init__(self, sink: ReceiptSink) -> None:
        self.sink = sink
        self.records: list[ExecutionRecord] = []
        self.repeats: list[Repeat] = []

    def start(self) -> None:
        self.sink.start()

    def stop(self) -> None:
        self.sink.stop()

    async def ready(self) -> bool:
        return await self.sink.ready()

    async def write(
        self, record: ExecutionRecord, quota: QuotaCheck | None = None
    ) -> PriorExecution | None:
        self.records.append(record)
        return await self.sink.write(record, quota)

    async def count_repeat(self, repeat: Repeat) -> None:
        self.repeats.append(repeat)
        await self.sink.count_repeat(repeat)


@pytest.fixture
def watched(runtime: Runtime) -> Iterator[WatchedSink]:
    real = runtime.write_path.sink
    runtime.write_path.sink = watched = WatchedSink(real)
    yield watched
    runtime.write_path.sink = real


def repeats_counted(runtime: Runtime, org_id: str, execution_id: str) -> int:
    events = [e for e in runtime.executions.lineage(org_id, execution_id)
              if e.kind == "idempotent_repeat"]  # fmt: skip
    return int(events[0].details["repeats"]) if events else 0


async def test_a_repeat_of_a_key_decided_here_stores_no_record_and_is_counted(
    caller: Caller, runtime: Runtime, watched: WatchedSink
) -> None:
    first = await caller.service.execute(caller.principal, staging_deploy("deploy-7"))
    again = await caller.service.execute(caller.principal, staging_deploy("deploy-7"))

    assert (again.receipt, again.repeated) == (first.receipt, True)
    assert len(watched.records) == 1  # the repeat was neither signed nor sent to be stored
    execution_id = msgspec.json.decode(first.receipt)["execution_id"]
    assert [r.execution_id for r in watched.repeats] == [execution_id]
    assert repeats_counted(runtime, caller.principal.org.org_id, execution_id) == 1


async def test_requests_with_one_key_at_once_make_one_decision(
    caller: Caller, runtime: Runtime, watched: WatchedSink
) -> None:
    results = await asyncio.gather(
        *(caller.service.execute(caller.principal, staging_deploy("deploy-8")) for _ in range(5))
    )

    assert {r.receipt for r in results} == {results[0].receipt}
    assert sorted(r.repeated for r in results) == [False, True, True, True, True]
    assert len(watched.records) == 1
    org_id = caller.principal.org.org_id
    assert list(stored(runtime, org_id).values()) == [results[0].receipt]
    execution_id = msgspec.json.decode(results[0].receipt)["execution_id"]
    assert repeats_counted(runtime, org_id, execution_id) == 4


async def test_another_request_under_a_key_decided_here_is_a_conflict(
    caller: Caller, watched: WatchedSink
) -> None:
    await caller.service.execute(caller.principal, staging_deploy("deploy-9"))
    other = parse_execute_request(
        {"surface": "deploy.staging", "action": "deploy", "payload": {"amount": 4}}, "deploy-9"
    )

    with pytest.raises(IdempotencyConflict):
        await caller.service.execute(caller.principal, other)
    assert (len(watched.records), watched.repeats) == (1, [])


async def test_repeats_waiting_on_a_refused_request_are_refused_too(
    caller: Caller, runtime: Runtime
) -> None:
    for _ in range(FREE_EXECUTES):
        await caller.service.execute(caller.principal, staging_deploy())

    outcomes = await asyncio.gather(
        *(caller.service.execute(caller.principal, staging_deploy("deploy-10")) for _ in range(3)),
        return_exceptions=True,
    )

    # Each waiter decided for itself once the first failed: refused, never a PERMIT.
    assert [type(o) for o in outcomes] == [QuotaExceeded] * 3
    assert len(stored(runtime, caller.principal.org.org_id)) == FREE_EXECUTES


async def test_a_repeat_is_not_answered_when_its_count_cannot_be_stored(
    caller: Caller, runtime: Runtime
) -> None:
    await caller.service.execute(caller.principal, staging_deploy("deploy-11"))
    runtime.stop()

    with pytest.raises(ServiceUnavailable):
        await caller.service.execute(caller.principal, staging_deploy("deploy-11"))


async def test_a_key_not_allowed_the_surface_is_refused_a_repeat_from_memory(
    caller: Caller,
) -> None:
    await caller.service.execute(caller.principal, staging_deploy("deploy-12"))
    plane = ControlPlane(caller.service)
    org_id = caller.principal.org.org_id
    _key, secret = await plane.issue_key(org_id, name="prod-only", role="execute",
                                         surfaces=["deploy.production"], expires_at=None,
                                         actor=PLATFORM_ADMIN)  # fmt: skip
    narrow = await caller.service.authenticate(f"Bearer {secret}")

    with pytest.raises(Forbidden):
        await caller.service.execute(narrow, staging_deploy("deploy-12"))


# --- the credential cache's secrets ----------------------------------------------------
def test_a_secret_seen_before_is_found_by_the_same_hash(runtime: Runtime) -> None:
    credentials = ExecutionService(runtime).credentials
    secret = generate_secret()
    first = credentials.secret_hash(secret)
    assert first == hash_secret(runtime.secret, secret)
    assert credentials.secret_hash(secret) == first


def test_a_secret_one_character_off_a_known_one_is_malformed(runtime: Runtime) -> None:
    credentials = ExecutionService(runtime).credentials
    secret = generate_secret()
    assert credentials.secret_hash(secret) is not None
    last = secret[-1]
    altered = secret[:-1] + ("a" if last != "a" else "b")  # the checksum no longer matches
    assert credentials.secret_hash(altered) is None


async def test_a_revoked_key_is_refused_though_its_secret_was_seen(runtime: Runtime) -> None:
    service = ExecutionService(runtime)
    plane = ControlPlane(service)
    org = await plane.create_org("Acme", "free", "a", actor=PLATFORM_ADMIN)
    key, secret = await plane.issue_key(
        org.org_id, name="ci", role="execute", surfaces=None, expires_at=None, actor=PLATFORM_ADMIN
    )
    await service.authenticate(f"Bearer {secret}")
    await plane.revoke_key(org.org_id, key.key_id, actor=PLATFORM_ADMIN)
    with pytest.raises(Unauthorized):
        await service.authenticate(f"Bearer {secret}")
    service.rate_limiter.close()


# --- a quota known to be used up (tenancy.quota.UsedUpQuotas) ----------------------------
async def use_up_the_quota(caller: Caller, *keys: str) -> list[ExecuteResult]:
    """The free plan's executes, under ``keys`` first, then one the writer refuses: from
    then on the service knows the quota is used up."""
    keyed = [staging_deploy(k) for k in keys]
    requests = keyed + [staging_deploy() for _ in range(FREE_EXECUTES - len(keyed))]
    results = [await caller.service.execute(caller.principal, r) for r in requests]
    with pytest.raises(QuotaExceeded):
        await caller.service.execute(caller.principal, staging_deploy())
    return results


async def test_past_a_used_up_quota_a_request_is_refused_without_being_decided(
    caller: Caller, runtime: Runtime, watched: WatchedSink
) -> None:
    await use_up_the_quota(caller)
    sent = len(watched.records)

    with pytest.raises(QuotaExceeded) as refused:
        await caller.service.execute(caller.principal, staging_deploy("deploy-20"))

    assert refused.value.status == 429
    assert len(watched.records) == sent  # neither signed nor sent to be stored
    assert len(stored(runtime, caller.principal.org.org_id)) == FREE_EXECUTES


async def test_past_a_used_up_quota_a_repeat_decided_elsewhere_gets_its_receipt(
    caller: Caller, runtime: Runtime, watched: WatchedSink
) -> None:
    [first, _] = await use_up_the_quota(caller, "deploy-21")
    caller.service.recent = RecentDecisions()  # as in a gateway that did not decide it
    sent = len(watched.records)

    again = await caller.service.execute(caller.principal, staging_deploy("deploy-21"))

    assert (again.receipt, again.repeated) == (first.receipt, True)
    assert len(watched.records) == sent
    execution_id = msgspec.json.decode(first.receipt)["execution_id"]
    assert repeats_counted(runtime, caller.principal.org.org_id, execution_id) == 1


async def test_past_a_used_up_quota_another_request_under_a_decided_key_is_a_conflict(
    caller: Caller,
) -> None:
    await use_up_the_quota(caller, "deploy-22")
    caller.service.recent = RecentDecisions()
    other = parse_execute_request(
        {"surface": "deploy.staging", "action": "deploy", "payload": {"amount": 4}}, "deploy-22"
    )

    with pytest.raises(IdempotencyConflict):
        await caller.service.execute(caller.principal, other)


async def test_past_a_used_up_quota_an_ungoverned_surface_is_still_not_found(
    caller: Caller,
) -> None:
    await use_up_the_quota(caller)
    ungoverned = parse_execute_request({"surface": "export.customers", "action": "export"}, None)

    with pytest.raises(SurfaceNotFound):
        await caller.service.execute(caller.principal, ungoverned)


async def test_a_plan_with_room_is_decided_though_the_old_plan_was_used_up(
    caller: Caller,
) -> None:
    await use_up_the_quota(caller)
    plane = ControlPlane(caller.service)
    await plane.update_org(caller.principal.org.org_id, plan="standard", actor=PLATFORM_ADMIN)
    upgraded = await caller.service.authenticate(f"Bearer {caller.secret}")

    result = await caller.service.execute(upgraded, staging_deploy())

    assert (result.decision, result.repeated) == ("PERMIT", False)


async def test_a_used_up_quota_is_asked_of_the_writer_again_after_the_ttl(
    caller: Caller, runtime: Runtime, watched: WatchedSink
) -> None:
    clock = HandMovedClock()
    caller.service.used_up_quotas = UsedUpQuotas(ttl=1.0, clock=clock)
    await use_up_the_quota(caller)
    sent = len(watched.records)
    with pytest.raises(QuotaExceeded):
        await caller.service.execute(caller.principal, staging_deploy())
    assert len(watched.records) == sent

    clock.now += 1.0
    with pytest.raises(QuotaExceeded):
        await caller.service.execute(caller.principal, staging_deploy())

    assert len(watched.records) == sent + 1  # decided and refused by the writer again
    assert len(stored(runtime, caller.principal.org.org_id)) == FREE_EXECUTES
