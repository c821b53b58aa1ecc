"""The Python SDK against the real app (in process, real database): ``consume``, and the
guards consuming a single-use PERMIT before acting, failing closed when they cannot."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from execauth_client import AsyncClient, NotPermitted, ReceiptNotUsable, guarded, require_permit
from execauth_client.verify import KeyList

from tests.approvals.conftest import Clock
from tests.consumption.conftest import Org, consume, permit

pytestmark = pytest.mark.anyio


class Unreachable(httpx.AsyncBaseTransport):
    """The app for every request but consume, which cannot reach the service."""

    def __init__(self, app: httpx.AsyncBaseTransport) -> None:
        self.app = app

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/consume"):
            raise httpx.ConnectError("connection refused", request=request)
        return await self.app.handle_async_request(request)


@pytest.fixture
async def sdk(client: httpx.AsyncClient, org: Org) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(
        "https://execauth.test",
        org.tenant.api_key,
        transport=client._transport,  # the same in-process app
        max_retries=0,
    ) as c:
        yield c


async def test_client_consume_returns_the_consumption(sdk: AsyncClient, client: httpx.AsyncClient,
                                                      org: Org) -> None:  # fmt: skip
    receipt = await permit(client, org)

    consumed = await sdk.consume(receipt, actor="agent-7", note="one transfer")

    assert consumed["receipt_id"] == receipt["receipt_id"]
    assert consumed["consumed_by"] == {"key_id": org.tenant.key_id, "actor": "agent-7"}


async def test_client_consume_a_second_time_raises_with_the_earlier_use(
    sdk: AsyncClient, client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await permit(client, org)
    first = await sdk.consume(receipt, actor="agent-7")

    with pytest.raises(ReceiptNotUsable) as refused:
        await sdk.consume(receipt, actor="agent-8")

    assert refused.value.code == "receipt_already_consumed"
    assert refused.value.status == 409
    assert refused.value.consumed == first


async def test_client_consume_of_an_expired_permit_raises(
    sdk: AsyncClient, client: httpx.AsyncClient, org: Org, clock: Clock
) -> None:
    receipt = await permit(client, org)
    clock.advance(minutes=10)

    with pytest.raises(ReceiptNotUsable) as refused:
        await sdk.consume(receipt)

    assert refused.value.code == "receipt_expired"


async def test_require_permit_consumes_a_single_use_permit(
    sdk: AsyncClient, client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await sdk.require_permit("pay.once", actor="agent-7")

    assert receipt.single_use
    again = await consume(client, receipt.receipt_id, org.executor)
    assert again.status_code == 409
    assert again.json()["details"][0]["consumed_by"] == {
        "key_id": org.tenant.key_id,
        "actor": "agent-7",
    }


async def test_require_permit_leaves_an_ordinary_permit_unconsumed(
    sdk: AsyncClient, client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await sdk.require_permit("pay.transfer", actor="agent-7", payload={"amount": 5})

    assert not receipt.single_use
    assert (await consume(client, receipt.receipt_id, org.executor)).status_code == 200


async def test_guarded_consumes_a_single_use_permit_before_running(
    sdk: AsyncClient, client: httpx.AsyncClient, org: Org
) -> None:
    ran: list[str] = []

    @guarded(sdk, surface="pay.once", actor="agent-7")
    async def pay() -> None:
        ran.append("paid")

    await pay()
    await pay()

    # Each call got its own PERMIT, consumed once: two consumptions in the audit trail.
    trail = await client.get("/operator/audit", headers=org.admin)
    consumed = [e for e in trail.json()["events"] if e["action"] == "receipt.consumed"]
    assert (ran, len(consumed)) == (["paid", "paid"], 2)


async def test_guarded_does_not_run_when_consumption_cannot_reach_the_service(
    client: httpx.AsyncClient, org: Org
) -> None:
    ran: list[str] = []
    transport = Unreachable(client._transport)
    async with AsyncClient(
        "https://execauth.test", org.tenant.api_key, transport=transport, max_retries=0
    ) as sdk:

        @guarded(sdk, surface="pay.once", actor="agent-7")
        async def pay() -> None:
            ran.append("paid")

        with pytest.raises(Exception, match="cannot reach"):
            await pay()

    assert ran == []


async def test_offline_require_permit_refuses_a_single_use_permit_without_a_consumer(
    sdk: AsyncClient, client: httpx.AsyncClient, org: Org
) -> None:
    answer = await client.post(
        "/v1/execute", json={"surface": "pay.once", "actor": "agent-7"}, headers=org.executor
    )
    receipt: dict[str, Any] = answer.json()
    keys = await sdk.keys()
    assert isinstance(keys, KeyList)

    with pytest.raises(NotPermitted, match="single-use"):
        require_permit(receipt, keys=keys, surface="pay.once", actor="agent-7")

    # Nothing was consumed: the PERMIT is still usable by whoever consumes it first.
    assert (await consume(client, receipt["receipt_id"], org.executor)).status_code == 200
