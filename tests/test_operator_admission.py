"""Heavy operator work is admitted per organization and per process (api/admission.py).

The bounds are checked on ``OperatorAdmission`` itself (holding tickets stands for
requests still running) and through the HTTP routes they guard.
"""

from __future__ import annotations

import httpx
import pytest

from execauth.api.admission import AdmissionLimits, OperatorAdmission
from execauth.config import Settings
from execauth.errors import RateLimited
from execauth.serving.runtime import Runtime
from execauth.usecases.execute import ExecutionService
from tests.conftest import ADMIN
from tests.operator.conftest import make_operators

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"operator_requests_per_minute": 3})


def admission(runtime: Runtime, **limits: float) -> OperatorAdmission:
    return OperatorAdmission(ExecutionService(runtime), AdmissionLimits(**limits))  # type: ignore[arg-type]


async def test_an_org_at_its_concurrency_is_refused_at_once_with_retry_after(
    runtime: Runtime,
) -> None:
    gate = admission(runtime, per_org=2, per_process=10)
    held = [await gate.admit("org_a"), await gate.admit("org_a")]
    with pytest.raises(RateLimited) as refused:
        await gate.admit("org_a")
    assert refused.value.headers == {"Retry-After": "1"}
    assert held


async def test_another_org_is_admitted_while_one_is_at_its_concurrency(runtime: Runtime) -> None:
    gate = admission(runtime, per_org=1, per_process=10)
    await gate.admit("org_a")
    await gate.admit("org_b")


async def test_a_released_ticket_gives_its_org_slot_back(runtime: Runtime) -> None:
    gate = admission(runtime, per_org=1, per_process=10)
    ticket = await gate.admit("org_a")
    ticket.release()
    ticket.release()  # once only: a second release must not free a slot it does not hold
    await gate.admit("org_a")
    with pytest.raises(RateLimited):
        await gate.admit("org_a")


async def test_a_full_lane_makes_the_next_request_wait_then_429(runtime: Runtime) -> None:
    gate = admission(runtime, per_org=5, per_process=1, queue_seconds=0.05)
    await gate.admit("org_a")
    with pytest.raises(RateLimited) as refused:
        await gate.admit("org_b")
    assert refused.value.headers == {"Retry-After": "1"}


async def test_a_refusal_by_the_lane_leaves_the_org_slot_free(runtime: Runtime) -> None:
    gate = admission(runtime, per_org=1, per_process=1, queue_seconds=0.05)
    first = await gate.admit("org_a")
    with pytest.raises(RateLimited):
        await gate.admit("org_b")
    first.release()
    await gate.admit("org_b")  # org_b's refused attempt did not keep its only slot


async def test_heavy_requests_over_the_org_rate_are_429_rate_limited(
    client: httpx.AsyncClient,
) -> None:
    ops = await make_operators(client)
    statuses = [
        (await client.post("/operator/replay", json={}, headers=ops.auditor)).status_code
        for _ in range(4)
    ]
    assert statuses == [200, 200, 200, 429]
    refused = await client.post("/operator/replay", json={}, headers=ops.auditor)
    assert refused.json()["error"] == "rate_limited"
    assert int(refused.headers["Retry-After"]) >= 1


async def test_the_operator_rate_is_not_the_execute_rate(client: httpx.AsyncClient) -> None:
    ops = await make_operators(client)
    for _ in range(3):
        await client.get("/operator/executions", headers=ops.auditor)
    execute = {"surface": "deploy.staging", "actor": "a", "payload": {"amount": 2}}
    answer = await client.post("/v1/execute", json=execute, headers=ops.tenant.auth)
    assert answer.status_code == 200


async def test_one_orgs_heavy_rate_does_not_limit_another_org(client: httpx.AsyncClient) -> None:
    first, second = await make_operators(client), await make_operators(client)
    for _ in range(3):
        await client.get("/operator/audit", headers=first.auditor)
    assert (await client.get("/operator/audit", headers=first.auditor)).status_code == 429
    assert (await client.get("/operator/audit", headers=second.auditor)).status_code == 200


async def test_an_unauthenticated_heavy_request_is_401_and_uses_no_rate(
    client: httpx.AsyncClient,
) -> None:
    ops = await make_operators(client)
    for _ in range(5):
        response = await client.post(
            "/operator/replay", json={}, headers={"Authorization": "Bearer nope"}
        )
        assert response.status_code == 401
    assert (await client.post("/operator/replay", json={}, headers=ops.auditor)).status_code == 200


async def test_console_heavy_routes_are_bounded_per_org_too(client: httpx.AsyncClient) -> None:
    ops = await make_operators(client)
    url = f"/console/v1/orgs/{ops.tenant.org_id}/replay"
    statuses = [(await client.post(url, json={}, headers=ADMIN)).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
