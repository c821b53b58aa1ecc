"""The ledger issue, item 6: a full disk → 503 ``service_unavailable``, nothing stored.

The disk fills for real as far as SQLite can tell: at the start of every transaction
``PRAGMA max_page_count`` is pinned to the database's current size, so a write that
has to grow the file fails inside SQLite with SQLITE_FULL ("database or disk is
full") and is rolled back by SQLite — the error and the rollback a full filesystem
causes. Requests carry a large payload (stored with the receipt for replay) so that
each one needs new pages, as it would once the free space inside pages is used up.

SQLite only: filling PostgreSQL's disk (SQLSTATE 53100) needs a tablespace on a
filesystem the test could fill, i.e. mount privileges; there the writer takes the
same path (any failed commit is 503), which tests/test_database_outage.py covers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Connection, event, text

from execauth.serving.runtime import Runtime
from execauth.tenancy.quota import month_period
from tests.conftest import Database, Tenant, make_tenant
from tests.test_fail_closed import assert_no_decision

pytestmark = pytest.mark.anyio

# A PERMIT (deploy.staging permits anything with an even amount) whose stored form
# needs about a dozen new 4 KiB pages.
LARGE = {"surface": "deploy.staging", "payload": {"amount": 2, "notes": "x" * 48_000}}


@dataclass
class Disk:
    full: bool = False


@pytest.fixture
def database(tmp_path: Path) -> Database:
    return Database(f"sqlite:///{tmp_path / 'execauth.db'}", None)


@pytest.fixture
def disk(runtime: Runtime) -> Iterator[Disk]:
    """Set ``disk.full`` and every transaction that starts afterwards cannot grow the file."""
    disk = Disk()
    # The receipt writer's engine: on SQLite one of its own (serving/write_path.py).
    assert runtime.write_path.local is not None
    engine = runtime.write_path.local.engine
    with engine.connect() as conn:
        unlimited = conn.exec_driver_sql("PRAGMA max_page_count").scalar_one()

    def pin(conn: Connection) -> None:
        # 1 is raised by SQLite to the current size: "cannot be reduced below it".
        limit = 1 if disk.full else unlimited
        sqlite = conn.connection.driver_connection
        assert sqlite is not None
        sqlite.execute(f"PRAGMA max_page_count = {limit}")

    event.listen(engine, "begin", pin)
    yield disk
    event.remove(engine, "begin", pin)


@pytest.fixture
async def tenant(client: httpx.AsyncClient, disk: Disk) -> Tenant:
    tenant = await make_tenant(client)
    warmup = await client.post("/v1/execute", json=LARGE, headers=tenant.auth)
    assert warmup.json()["decision"] == "PERMIT"  # with space, the large request works
    return tenant


async def test_execute_is_503_when_the_disk_is_full(
    client: httpx.AsyncClient, tenant: Tenant, disk: Disk, caplog: pytest.LogCaptureFixture
) -> None:
    disk.full = True
    response = await client.post("/v1/execute", json=LARGE, headers=tenant.auth)
    assert_no_decision(response, 503, "service_unavailable")
    assert "database or disk is full" in caplog.text  # SQLite's own SQLITE_FULL, nothing else


async def test_a_receipt_refused_for_a_full_disk_leaves_nothing_behind(
    client: httpx.AsyncClient, tenant: Tenant, disk: Disk, runtime: Runtime
) -> None:
    disk.full = True
    await client.post("/v1/execute", json=LARGE, headers=tenant.auth)
    disk.full = False
    assert runtime.executions.count(tenant.org_id) == 1  # the warm-up only
    month = month_period(datetime.now(UTC))
    assert runtime.executions.executes_in_period(tenant.org_id, month) == 1
    with runtime.engine.connect() as conn:
        assert conn.execute(text("PRAGMA integrity_check")).scalar_one() == "ok"


async def test_execute_answers_again_once_there_is_space(
    client: httpx.AsyncClient, tenant: Tenant, disk: Disk, runtime: Runtime
) -> None:
    disk.full = True
    assert (await client.post("/v1/execute", json=LARGE, headers=tenant.auth)).status_code == 503
    disk.full = False
    response = await client.post("/v1/execute", json=LARGE, headers=tenant.auth)
    assert response.status_code == 200, response.text
    assert response.json()["decision"] == "PERMIT"
    assert runtime.executions.count(tenant.org_id) == 2
