"""Bound grants at the MCP gateway (docs/agents.md, "Bound grants"): a real MCP client
session through the gateway to ``tools_server.py``. The policy PERMITs the call but binds
its arguments; a call beyond the grant is refused with the reason code and the server,
which records every call it receives, never sees it."""

from __future__ import annotations

from pathlib import Path

import httpx
import mcp_types as types
import pytest

from execauth.agents.gateway import DECISION_META, RECEIPT_ID_META
from tests.agents.conftest import gateway_session
from tests.conftest import Tenant, make_tenant

pytestmark = pytest.mark.anyio

BOUND_POLICY = """\
description: the agent may transfer euros, bound to at most 100 a call
surfaces:
  - match: mcp.files.transfer
    rules:
      - id: euro-transfers
        permit: payload.currency == "EUR"
        constraints:
          max_amount: 100
          allowed_tool_args: {currency: [EUR]}
  - match: mcp.files.read_file
    rules:
      - id: docs-only
        permit: context.readOnlyHint
        constraints:
          allowed_tool_args: {path: [README.md, CHANGELOG.md]}
  - match: mcp.files.web_search
    rules:
      - id: regional-search
        permit: "true"
        constraints: {x_region: eu-west-1}
"""


@pytest.fixture
async def bound_tenant(client: httpx.AsyncClient) -> Tenant:
    return await make_tenant(client, policy=BOUND_POLICY)


def text(result: types.CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def test_a_call_within_the_grant_reaches_the_server(
    client: httpx.AsyncClient, bound_tenant: Tenant, tmp_path: Path
) -> None:
    async with gateway_session(client, bound_tenant.api_key, tmp_path) as session:
        result = await session.agent.call_tool("transfer", {"amount": 100, "currency": "EUR"})
    assert not result.is_error, text(result)
    assert session.received() == [
        {"tool": "transfer", "arguments": {"amount": 100, "currency": "EUR"}}
    ]


async def test_an_amount_beyond_max_amount_is_refused_and_never_called(
    client: httpx.AsyncClient, bound_tenant: Tenant, tmp_path: Path
) -> None:
    async with gateway_session(client, bound_tenant.api_key, tmp_path) as session:
        result = await session.agent.call_tool("transfer", {"amount": 101, "currency": "EUR"})
    assert result.is_error
    assert "constraint_exceeded:max_amount" in text(result)
    assert result.meta is not None
    assert result.meta[DECISION_META] == "PERMIT"  # the service said yes; the grant said no
    assert result.meta[RECEIPT_ID_META].startswith("service_rcpt_")
    assert session.received() == []


async def test_an_argument_outside_allowed_tool_args_is_refused_and_never_called(
    client: httpx.AsyncClient, bound_tenant: Tenant, tmp_path: Path
) -> None:
    async with gateway_session(client, bound_tenant.api_key, tmp_path) as session:
        result = await session.agent.call_tool("read_file", {"path": "secrets.env"})
    assert result.is_error
    assert "constraint_exceeded:allowed_tool_args.path" in text(result)
    assert session.received() == []


async def test_a_constraint_the_gateway_cannot_check_refuses_the_call(
    client: httpx.AsyncClient, bound_tenant: Tenant, tmp_path: Path
) -> None:
    async with gateway_session(client, bound_tenant.api_key, tmp_path) as session:
        result = await session.agent.call_tool("web_search", {"query": "weather"})
    assert result.is_error
    assert "constraint_unknown:x_region" in text(result)
    assert session.received() == []
