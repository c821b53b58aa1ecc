"""Console session rows (store/web_sessions.py) on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from execauth.serving.runtime import Runtime
from execauth.store.web_sessions import WebSession, WebSessionStore
from tests.conftest import Tenant

pytestmark = pytest.mark.anyio
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def session(tenant: Tenant, name: str, created_at: datetime) -> WebSession:
    return WebSession(
        name * 64, tenant.key_id, "f" * 64, created_at, created_at + timedelta(hours=8)
    )


async def test_a_session_is_live_until_its_expiry(runtime: Runtime, tenant: Tenant) -> None:
    store = WebSessionStore(runtime.engine)
    store.open_session(session(tenant, "a", NOW))
    assert store.live_session("a" * 64, NOW + timedelta(hours=8, microseconds=-1)) is not None
    assert store.live_session("a" * 64, NOW + timedelta(hours=8)) is None


async def test_an_ended_session_is_not_live(runtime: Runtime, tenant: Tenant) -> None:
    store = WebSessionStore(runtime.engine)
    store.open_session(session(tenant, "a", NOW))
    store.end_session("a" * 64)
    assert store.live_session("a" * 64, NOW) is None


async def test_opening_a_session_drops_the_rows_of_expired_ones(
    runtime: Runtime, tenant: Tenant
) -> None:
    store = WebSessionStore(runtime.engine)
    store.open_session(session(tenant, "a", NOW))
    store.open_session(session(tenant, "b", NOW + timedelta(hours=9)))
    assert store.live_session("a" * 64, NOW) is None  # gone, not merely expired
    assert store.live_session("b" * 64, NOW + timedelta(hours=9)) is not None
