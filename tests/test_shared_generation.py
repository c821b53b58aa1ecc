"""Workers of one ``serve --workers N`` hear of a key or policy change at once.

Two apps over one database stand for two worker processes; the caches' ttl is an
hour here, so only the shared change counter can make the second app notice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest

from execauth.api.app import create_app
from execauth.config import Settings
from execauth.serving.runtime import Runtime
from execauth.serving.shared_generation import GenerationWatch, SharedGeneration
from tests.conftest import ADMIN, make_tenant

pytestmark = pytest.mark.anyio
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"refresh_interval_seconds": 3600.0})


async def _clients(
    runtime: Runtime, shared: list[SharedGeneration | None]
) -> AsyncIterator[list[httpx.AsyncClient]]:
    async with AsyncExitStack() as stack:
        clients = []
        for generation in shared:
            app = create_app(runtime, shared_generation=generation)
            await stack.enter_async_context(app.router.lifespan_context(app))
            transport = httpx.ASGITransport(app=app)
            clients.append(
                await stack.enter_async_context(
                    httpx.AsyncClient(transport=transport, base_url="https://execauth.test")
                )
            )
        yield clients


@pytest.fixture
async def workers(runtime: Runtime, tmp_path: Path) -> AsyncIterator[list[httpx.AsyncClient]]:
    path = str(tmp_path / "generation")
    async for clients in _clients(runtime, [SharedGeneration(path), SharedGeneration(path)]):
        yield clients


@pytest.fixture
async def unshared(runtime: Runtime) -> AsyncIterator[list[httpx.AsyncClient]]:
    async for clients in _clients(runtime, [None, None]):
        yield clients


async def test_a_key_revoked_in_one_worker_is_refused_by_the_other_at_once(
    workers: list[httpx.AsyncClient],
) -> None:
    first, second = workers
    tenant = await make_tenant(first)
    assert (await second.post("/v1/execute", json=PERMIT, headers=tenant.auth)).status_code == 200
    revoked = await first.delete(
        f"/console/v1/orgs/{tenant.org_id}/keys/{tenant.key_id}", headers=ADMIN
    )
    assert revoked.status_code == 204
    assert (await second.post("/v1/execute", json=PERMIT, headers=tenant.auth)).status_code == 401


async def test_without_a_shared_counter_the_other_worker_waits_for_its_ttl(
    unshared: list[httpx.AsyncClient],
) -> None:
    """The control: what the counter changes (an hour's ttl here, 1 s by default)."""
    first, second = unshared
    tenant = await make_tenant(first)
    assert (await second.post("/v1/execute", json=PERMIT, headers=tenant.auth)).status_code == 200
    await first.delete(f"/console/v1/orgs/{tenant.org_id}/keys/{tenant.key_id}", headers=ADMIN)
    assert (await second.post("/v1/execute", json=PERMIT, headers=tenant.auth)).status_code == 200


async def test_a_policy_published_in_one_worker_decides_in_the_other_at_once(
    workers: list[httpx.AsyncClient],
) -> None:
    first, second = workers
    tenant = await make_tenant(first)
    assert (await second.post("/v1/execute", json=PERMIT, headers=tenant.auth)).json()[
        "decision"
    ] == "PERMIT"
    deny_all = (
        "surfaces:\n  - match: deploy.production\n    rules:\n"
        "      - id: never\n        deny: 'true'\n"
    )
    published = await first.put(
        f"/console/v1/orgs/{tenant.org_id}/policies/deploys", content=deny_all, headers=ADMIN
    )
    assert published.status_code == 201, published.text
    answer = await second.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert answer.json()["decision"] == "DENY"


def test_a_watch_sees_each_change_of_another_process_once(tmp_path: Path) -> None:
    path = str(tmp_path / "generation")
    mine, theirs = GenerationWatch(SharedGeneration(path)), GenerationWatch(SharedGeneration(path))
    assert not mine.changed_elsewhere()
    theirs.announce()
    assert mine.changed_elsewhere()
    assert not mine.changed_elsewhere()


def test_a_watch_without_a_shared_counter_never_reports_a_change() -> None:
    watch = GenerationWatch(None)
    watch.announce()
    assert not watch.changed_elsewhere()
