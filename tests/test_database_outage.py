"""The ledger issue, item 6: PostgreSQL unavailable → 503 ``service_unavailable``.

Never a decision, nothing half-written, and the service answers again by itself
once the database does. The outage is real: the test's own database is set to
refuse connections (``ALLOW_CONNECTIONS false``) and every open connection to it
is terminated, which is what the service sees when PostgreSQL restarts or fails over.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from execauth.config import Settings
from execauth.serving.runtime import Runtime
from execauth.store.database import normalize_url
from execauth.tenancy.quota import month_period
from tests.conftest import POSTGRES_URL, Database, Tenant, fresh_postgres_database, make_tenant
from tests.test_fail_closed import PERMIT, assert_no_decision

pytestmark = pytest.mark.anyio


@dataclass
class Outage:
    """Switches one PostgreSQL database off (refuse and drop connections) and on again."""

    url: str
    server: Engine  # a connection to another database of the same server

    @property
    def name(self) -> str:
        return str(make_url(self.url).database)

    def begin(self) -> None:
        with self.server.connect() as conn:
            conn.execute(text(f"ALTER DATABASE {self.name} WITH ALLOW_CONNECTIONS false"))
            conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"),
                {"n": self.name},
            )

    def end(self) -> None:
        with self.server.connect() as conn:
            conn.execute(text(f"ALTER DATABASE {self.name} WITH ALLOW_CONNECTIONS true"))


@pytest.fixture
def outage() -> Iterator[Outage]:
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL outage tests need EXECAUTH_TEST_POSTGRES_URL (set by .ci/run)")
    with fresh_postgres_database("execauth_outage_") as url:
        server = create_engine(normalize_url(POSTGRES_URL), isolation_level="AUTOCOMMIT")
        switch = Outage(url, server)
        try:
            yield switch
        finally:
            switch.end()
            server.dispose()


@pytest.fixture
def database(outage: Outage) -> Database:
    """The conftest's app and runtime, on the database that the test switches off."""
    return Database(outage.url, None)


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Credential and policy caches that outlive the test: a warmed-up request reaches
    the receipt writer without reading the database first."""
    return settings.model_copy(update={"refresh_interval_seconds": 3600.0})


async def warmed_up(client: httpx.AsyncClient) -> Tenant:
    tenant = await make_tenant(client)
    warmup = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert warmup.json()["decision"] == "PERMIT"
    return tenant


async def test_execute_is_503_while_postgres_refuses_connections(
    client: httpx.AsyncClient, outage: Outage
) -> None:
    tenant = await make_tenant(client)  # its key is not cached: authenticating needs the database
    outage.begin()
    response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert_no_decision(response, 503, "service_unavailable")
    assert response.headers["retry-after"] == "1"


async def test_a_receipt_the_outage_kept_from_being_stored_leaves_nothing_behind(
    client: httpx.AsyncClient, outage: Outage, runtime: Runtime
) -> None:
    tenant = await warmed_up(client)
    outage.begin()
    response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert_no_decision(response, 503, "service_unavailable")
    outage.end()
    month = month_period(datetime.now(UTC))
    assert runtime.executions.count(tenant.org_id) == 1  # the warm-up only
    assert runtime.executions.executes_in_period(tenant.org_id, month) == 1


async def test_readyz_is_503_while_postgres_refuses_connections(
    client: httpx.AsyncClient, outage: Outage
) -> None:
    outage.begin()
    assert (await client.get("/readyz")).status_code == 503


async def test_execute_answers_again_once_postgres_accepts_connections(
    client: httpx.AsyncClient, outage: Outage
) -> None:
    tenant = await warmed_up(client)
    outage.begin()
    assert (await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)).status_code == 503
    outage.end()
    response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert response.status_code == 200, response.text
    assert response.json()["decision"] == "PERMIT"


async def test_the_first_receipt_after_postgres_dropped_idle_connections_is_stored(
    client: httpx.AsyncClient, outage: Outage
) -> None:
    tenant = await warmed_up(client)
    outage.begin()  # a restart or failover with no request in between
    outage.end()
    response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert response.status_code == 200, response.text
