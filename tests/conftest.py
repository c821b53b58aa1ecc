"""Shared fixtures: a real database (SQLite always, PostgreSQL when configured), an app, a client.

PostgreSQL tests read ``EXECAUTH_TEST_POSTGRES_URL`` and skip with a visible reason
when it is unset; each test gets its own schema so tests never see each other's rows.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from starlette.applications import Starlette

from execauth.api.app import create_app
from execauth.config import PlanSettings, Settings
from execauth.serving.runtime import Runtime, bootstrap
from execauth.store.database import normalize_url

ADMIN_TOKEN = "test-admin-token-" + "x" * 20
POSTGRES_URL = os.environ.get("EXECAUTH_TEST_POSTGRES_URL")
REDIS_URL = os.environ.get("EXECAUTH_TEST_REDIS_URL")

DEPLOY_POLICY = """
description: Production deploys
surfaces:
  - match: deploy.production
    require: [context.branch]
    rules:
      - id: main-only
        permit: context.branch == "main" && actor.startsWith("release-")
        ttl: 10m
      - id: wrong-branch
        deny: context.branch != "main"
        reason: SERVICE_POLICY_WRONG_BRANCH
        message: Only main can be deployed
  - match: deploy.staging
    rules:
      - id: anyone
        permit: "true"
      - id: even-amount
        deny: payload.amount % 2 == 1
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Database:
    url: str
    schema: str | None


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A fresh, empty database on each backend."""
    if request.param == "sqlite":
        yield Database(f"sqlite:///{tmp_path / 'execauth.db'}", None)
        return
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL tests need EXECAUTH_TEST_POSTGRES_URL (set by .ci/run)")
    schema = "t_" + secrets.token_hex(6)
    engine = create_engine(normalize_url(POSTGRES_URL))
    with engine.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield Database(POSTGRES_URL, schema)
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        engine.dispose()


@contextmanager
def fresh_postgres_database(prefix: str) -> Iterator[str]:
    """A whole new database on the ``EXECAUTH_TEST_POSTGRES_URL`` server; its URL.

    For tests a schema cannot isolate: separate ``execauth serve`` processes, or a
    database made to refuse connections. Dropped afterwards, connected or not.
    """
    assert POSTGRES_URL, "callers skip first when EXECAUTH_TEST_POSTGRES_URL is unset"
    name = prefix + secrets.token_hex(4)
    server = create_engine(normalize_url(POSTGRES_URL), isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with server.connect() as conn:
            conn.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))
        server.dispose()


@pytest.fixture
def plans() -> dict[str, PlanSettings]:
    """The plan catalog; a test module overrides this fixture to shrink a plan."""
    return Settings().plans


@pytest.fixture
def redis_url() -> str | None:
    """Rate limits in memory unless a test module overrides this with a Redis URL."""
    return None


@pytest.fixture
def settings(
    database: Database, tmp_path: Path, plans: dict[str, PlanSettings], redis_url: str | None
) -> Settings:
    return Settings(
        redis_url=redis_url,
        database_url=database.url,
        secret_key="test-secret-" + "s" * 32,
        admin_token=ADMIN_TOKEN,
        issuer="https://execauth.test",
        secret_key_file=tmp_path / "unused.key",
        plans=plans,
        # Organizations made without a plan are on "free", whose quota tests shrink; the
        # shipped default (unmetered) is tested in tests/test_self_hosted_defaults.py.
        default_plan="free" if "free" in plans else None,
        # Tests sequence explicitly (app.state.sequencer.run_once()), so "pending" is testable.
        sequencer_interval_seconds=3600,
        # Likewise streaming: tests/streaming runs the dispatcher's turns itself.
        streaming_enabled=False,
    )


class HandMovedClock:
    """A monotonic clock for tests: it moves only when the test moves ``now``."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def small_plans(*, free_executes: int = 5, per_minute: int = 5_000) -> dict[str, PlanSettings]:
    """The default catalog with a free plan small enough to exhaust in a test."""
    catalog = Settings().plans
    catalog["free"] = PlanSettings(executes_per_month=free_executes, requests_per_minute=per_minute)
    return catalog


@pytest.fixture
def runtime(settings: Settings, database: Database) -> Iterator[Runtime]:
    rt = bootstrap(settings, schema=database.schema)
    yield rt
    rt.stop()


@pytest.fixture
async def client(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(runtime)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://execauth.test") as c:
            yield c


ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@dataclass
class Tenant:
    org_id: str
    api_key: str
    key_id: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


async def make_tenant(
    client: httpx.AsyncClient,
    *,
    policy: str | None = DEPLOY_POLICY,
    wire_profile: str = "a",
    **key_spec: Any,
) -> Tenant:
    org = await client.post(
        "/console/v1/orgs", json={"name": "Acme", "wire_profile": wire_profile}, headers=ADMIN
    )
    assert org.status_code == 201, org.text
    org_id = org.json()["org_id"]
    key = await client.post(
        f"/console/v1/orgs/{org_id}/keys", json={"name": "ci", **key_spec}, headers=ADMIN
    )
    assert key.status_code == 201, key.text
    if policy is not None:
        published = await client.put(
            f"/console/v1/orgs/{org_id}/policies/deploys", content=policy, headers=ADMIN
        )
        assert published.status_code == 201, published.text
    return Tenant(org_id, key.json()["api_key"], key.json()["key_id"])


@pytest.fixture
async def tenant(client: httpx.AsyncClient) -> Tenant:
    return await make_tenant(client)


def sequence(client: httpx.AsyncClient) -> int:
    """Run the app's sequencer now (tests configure it not to run on its own)."""
    app = client._transport.app  # type: ignore[attr-defined]
    assert isinstance(app, Starlette)
    done: int = app.state.sequencer.run_once()
    return done


async def proof(client: httpx.AsyncClient, tenant: Tenant, receipt_id: str) -> httpx.Response:
    """``GET /v1/receipts/{receipt_id}/proof`` as the tenant."""
    return await client.get(f"/v1/receipts/{receipt_id}/proof", headers=tenant.auth)
