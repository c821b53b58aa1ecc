"""``ExecutionService`` driven as plain calls: no app, no HTTP, a runtime on a SQLite file.

The organization, its key and its policy are made through ``ControlPlane``, the use case
the console calls; the executes through ``ExecutionService.execute``, the one the gateway
calls. What is checked is read back from the database through a connection of its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import msgspec
import pytest
from sqlalchemy import select

from execauth.config import PlanSettings, Settings
from execauth.errors import QuotaExceeded, ServiceUnavailable, Unauthorized
from execauth.request import ExecuteRequest, parse_execute_request
from execauth.serving.runtime import Runtime, bootstrap
from execauth.store.database import make_engine
from execauth.store.tables import executions
from execauth.tenancy.api_keys import generate_secret, hash_secret
from execauth.tenancy.audit import PLATFORM_ADMIN
from execauth.usecases.control_plane import ControlPlane
from execauth.usecases.execute import ExecutionService, Principal
from tests.conftest import DEPLOY_POLICY, Database, small_plans

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
    yield Caller(service, await service.authenticate(f"Bearer {secret}"))
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
