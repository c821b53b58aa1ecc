"""Single-use PERMITs through the MCP gateway, with a real MCP client session and a real MCP
server (tools_server.py records every call it receives): a PERMIT that says
``single_use: true`` is consumed by ``admit`` before the tool is called, so at most one
call ever reaches the server per receipt, however many present it at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from execauth_client import AsyncClient, Receipt

from execauth.agents.gateway import RECEIPT_ID_META
from tests.agents.conftest import gateway_session
from tests.conftest import Tenant, make_tenant

pytestmark = pytest.mark.anyio

ONCE_POLICY = """\
surfaces:
  - match: mcp.files.transfer
    require: [payload.amount, payload.currency]
    rules:
      - id: one-small-transfer
        permit: payload.amount <= 100 && payload.currency == "EUR"
        single_use: true
        ttl: 5m
"""
TRANSFER = {"amount": 40, "currency": "EUR"}


@pytest.fixture
async def once_tenant(client: httpx.AsyncClient) -> Tenant:
    return await make_tenant(client, policy=ONCE_POLICY)


def text(result: types.CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, types.TextContent))


class ConsumeUnreachable(httpx.AsyncBaseTransport):
    """The in-process app for everything but consume, which cannot reach the service."""

    def __init__(self, app: httpx.AsyncBaseTransport) -> None:
        self.app = app

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/consume"):
            raise httpx.ConnectError("connection refused", request=request)
        return await self.app.handle_async_request(request)


async def test_a_single_use_permit_is_consumed_before_the_call_reaches_the_server(
    client: httpx.AsyncClient, once_tenant: Tenant, tmp_path: Path
) -> None:
    async with gateway_session(client, once_tenant.api_key, tmp_path) as session:
        result = await session.agent.call_tool("transfer", TRANSFER)

    assert not result.is_error, text(result)
    assert session.received() == [{"tool": "transfer", "arguments": TRANSFER}]
    assert result.meta is not None
    receipt_id = result.meta[RECEIPT_ID_META]
    again = await client.post(f"/v1/receipts/{receipt_id}/consume", headers=once_tenant.auth)
    assert again.status_code == 409, again.text
    assert again.json()["details"][0]["consumed_by"]["actor"] == "agent:test-7"


async def test_a_replayed_single_use_permit_reaches_the_server_once_under_concurrent_calls(
    client: httpx.AsyncClient, once_tenant: Tenant, tmp_path: Path
) -> None:
    async with gateway_session(client, once_tenant.api_key, tmp_path) as session:
        execauth = session.gateway.execauth
        decide = execauth.require_permit
        first: list[Receipt] = []
        ready = anyio.Lock()

        async def replay(surface: str, **request: Any) -> Receipt:
            # An agent (or an attacker) presenting one verified PERMIT for every call.
            async with ready:
                if not first:
                    first.append(await decide(surface, **request))
            return first[0]

        object.__setattr__(execauth, "require_permit", replay)
        results: list[types.CallToolResult] = []

        async def call() -> None:
            results.append(await session.agent.call_tool("transfer", TRANSFER))

        async with anyio.create_task_group() as calls:
            for _ in range(6):
                calls.start_soon(call)

    assert session.received() == [{"tool": "transfer", "arguments": TRANSFER}]
    assert sum(not r.is_error for r in results) == 1
    refused = [r for r in results if r.is_error]
    assert len(refused) == 5
    assert all("receipt_already_consumed" in text(r) for r in refused), [text(r) for r in refused]


async def test_a_call_whose_permit_cannot_be_consumed_never_reaches_the_server(
    client: httpx.AsyncClient, once_tenant: Tenant, tmp_path: Path
) -> None:
    transport = ConsumeUnreachable(client._transport)
    async with gateway_session(
        client, once_tenant.api_key, tmp_path, transport=transport
    ) as session:
        result = await session.agent.call_tool("transfer", TRANSFER)

    assert result.is_error
    assert "could not be consumed" in text(result)
    assert session.received() == []


async def test_a_single_use_permit_the_client_consumed_elsewhere_is_refused(
    client: httpx.AsyncClient, once_tenant: Tenant, tmp_path: Path
) -> None:
    async with gateway_session(client, once_tenant.api_key, tmp_path) as session:
        execauth: AsyncClient = session.gateway.execauth
        decide = execauth.require_permit

        async def used_up(surface: str, **request: Any) -> Receipt:
            receipt = await decide(surface, **request)
            await execauth.consume(receipt, actor="someone-else")  # used before the gateway
            return receipt

        object.__setattr__(execauth, "require_permit", used_up)
        result = await session.agent.call_tool("transfer", TRANSFER)

    assert result.is_error
    assert "receipt_already_consumed" in text(result)
    assert "someone-else" in text(result)
    assert session.received() == []
