"""Non-negotiable 1: no error, timeout, missing key or exception ever becomes PERMIT.

Each test breaks one dependency of the execute path and checks the answer is an
error (500/503) with no receipt, never a decision.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from execauth.api.app import create_app
from execauth.serving.runtime import Runtime
from tests.conftest import Tenant, make_tenant

pytestmark = pytest.mark.anyio

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


@pytest.fixture
async def lenient_client(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    """A client that sees the 500 the app sends instead of the re-raised exception."""
    app = create_app(runtime)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="https://execauth.test") as c:
            yield c


@pytest.fixture
async def ready_tenant(lenient_client: httpx.AsyncClient) -> Tenant:
    tenant = await make_tenant(lenient_client)
    warmup = await lenient_client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert warmup.json()["decision"] == "PERMIT"  # the path works before we break it
    return tenant


def assert_no_decision(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == code
    assert "decision" not in body
    assert "signature" not in body


async def test_signing_failure_is_500_without_receipt(
    lenient_client: httpx.AsyncClient,
    ready_tenant: Tenant,
    runtime: Runtime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    signer = runtime.keyring.signer(datetime.now(UTC))

    def broken_sign(data: bytes) -> bytes:
        raise RuntimeError("signing device unavailable")

    monkeypatch.setattr(signer, "sign", broken_sign)
    response = await lenient_client.post("/v1/execute", json=PERMIT, headers=ready_tenant.auth)
    assert_no_decision(response, 500, "internal_error")
    assert runtime.executions.count(ready_tenant.org_id) == 1  # only the warm-up


async def test_no_usable_signing_key_is_503(
    lenient_client: httpx.AsyncClient, ready_tenant: Tenant, runtime: Runtime
) -> None:

    for record in runtime.keyring.records:
        runtime.signing_keys.revoke(record.key_id, datetime.now(UTC), "test")
    runtime.keyring.refresh(datetime.now(UTC))
    response = await lenient_client.post("/v1/execute", json=PERMIT, headers=ready_tenant.auth)
    assert_no_decision(response, 503, "service_unavailable")


async def test_receipt_store_failure_is_503(
    lenient_client: httpx.AsyncClient, ready_tenant: Tenant, runtime: Runtime
) -> None:
    with runtime.engine.begin() as conn:
        conn.execute(text("DROP TABLE executions"))
    response = await lenient_client.post("/v1/execute", json=PERMIT, headers=ready_tenant.auth)
    assert_no_decision(response, 503, "service_unavailable")


async def test_receipt_store_timeout_is_503(
    lenient_client: httpx.AsyncClient,
    ready_tenant: Tenant,
    runtime: Runtime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import execauth.serving.receipt_writer as writer_module

    # Both ways the writer stores a record: the transaction, and on PostgreSQL the one
    # statement a batch (which takes the record once the month's counter row exists).
    for name in ("insert_execution", "store_in_one_statement"):
        original = getattr(writer_module, name)

        def slow(*args: Any, original: Any = original) -> Any:
            time.sleep(0.5)
            return original(*args)

        monkeypatch.setattr(writer_module, name, slow)
    monkeypatch.setattr(runtime.writer, "timeout_seconds", 0.05)
    response = await lenient_client.post("/v1/execute", json=PERMIT, headers=ready_tenant.auth)
    assert_no_decision(response, 503, "service_unavailable")


async def test_stopped_writer_is_503(
    lenient_client: httpx.AsyncClient, ready_tenant: Tenant, runtime: Runtime
) -> None:
    runtime.writer.stop()
    response = await lenient_client.post("/v1/execute", json=PERMIT, headers=ready_tenant.auth)
    assert_no_decision(response, 503, "service_unavailable")
    runtime.writer.start()


async def test_policy_store_failure_is_500(
    lenient_client: httpx.AsyncClient, runtime: Runtime
) -> None:
    tenant = await make_tenant(lenient_client)
    with runtime.engine.begin() as conn:
        conn.execute(text("DROP TABLE policies"))
    response = await lenient_client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert_no_decision(response, 500, "internal_error")


async def test_credential_store_failure_is_500_not_anonymous_access(
    lenient_client: httpx.AsyncClient, runtime: Runtime
) -> None:
    tenant = await make_tenant(lenient_client)
    # PostgreSQL refuses to drop a table others reference (console sessions) without CASCADE.
    cascade = " CASCADE" if runtime.engine.dialect.name == "postgresql" else ""
    with runtime.engine.begin() as conn:
        conn.execute(text("DROP TABLE api_keys" + cascade))
    response = await lenient_client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert_no_decision(response, 500, "internal_error")


async def test_unexpected_engine_exception_is_500(
    lenient_client: httpx.AsyncClient, ready_tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    import execauth.usecases.execute as service_module

    def exploding_evaluate(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError("out of memory")

    monkeypatch.setattr(service_module, "evaluate", exploding_evaluate)
    response = await lenient_client.post("/v1/execute", json=PERMIT, headers=ready_tenant.auth)
    assert_no_decision(response, 500, "internal_error")


async def test_readyz_reports_a_broken_store(
    lenient_client: httpx.AsyncClient, runtime: Runtime
) -> None:
    assert (await lenient_client.get("/readyz")).status_code == 200
    runtime.writer.stop()
    assert (await lenient_client.get("/readyz")).status_code == 503
    runtime.writer.start()
