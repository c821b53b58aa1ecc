"""The MCP gateway with a real MCP client session and a real MCP server (tools_server.py).

Each refused call is shown not to have reached the server: it records every call it gets.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx
import mcp_types as types
import pytest
from execauth_client import KeyList

from execauth.agents.gateway import DECISION_META, RECEIPT_ID_META
from execauth.agents.listing import always_denied_by_files
from execauth.agents.tool_map import ToolMap
from tests.agents.conftest import AGENT_POLICY, gateway_session
from tests.conftest import ADMIN, Tenant, make_tenant, sequence

pytestmark = pytest.mark.anyio


@pytest.fixture
async def agent_tenant(client: httpx.AsyncClient) -> Tenant:
    return await make_tenant(client, policy=AGENT_POLICY)


def text(result: types.CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def test_a_permitted_call_reaches_the_server_with_its_receipt_id(
    client: httpx.AsyncClient, agent_tenant: Tenant, tmp_path: Path
) -> None:
    async with gateway_session(client, agent_tenant.api_key, tmp_path) as session:
        result = await session.agent.call_tool("read_file", {"path": "README.md"})
    assert not result.is_error
    assert text(result) == "contents of README.md"
    assert session.received() == [{"tool": "read_file", "arguments": {"path": "README.md"}}]
    assert result.meta is not None
    assert result.meta[DECISION_META] == "PERMIT"
    assert result.meta[RECEIPT_ID_META].startswith("service_rcpt_")


async def test_the_permit_of_a_call_is_in_the_organizations_log(
    client: httpx.AsyncClient, agent_tenant: Tenant, tmp_path: Path
) -> None:
    async with gateway_session(client, agent_tenant.api_key, tmp_path) as session:
        result = await session.agent.call_tool("transfer", {"amount": 40, "currency": "EUR"})
    assert result.meta is not None
    receipt_id = result.meta[RECEIPT_ID_META]
    sequence(client)
    proof = await client.get(f"/v1/receipts/{receipt_id}/proof", headers=agent_tenant.auth)
    assert proof.status_code == 200, proof.text
    assert proof.json()["receipt_id"] == receipt_id


async def test_a_denied_call_never_reaches_the_server_and_names_the_reason(
    client: httpx.AsyncClient, agent_tenant: Tenant, tmp_path: Path
) -> None:
    async with gateway_session(client, agent_tenant.api_key, tmp_path) as session:
        result = await session.agent.call_tool("transfer", {"amount": 5000, "currency": "EUR"})
    assert result.is_error
    assert "SERVICE_POLICY_AMOUNT_TOO_LARGE" in text(result)
    assert "Transfers above 100 need a person" in text(result)
    assert result.meta is not None
    assert result.meta[DECISION_META] == "DENY"
    assert result.meta[RECEIPT_ID_META].startswith("service_rcpt_")
    assert session.received() == []


async def test_a_silence_call_never_reaches_the_server(
    client: httpx.AsyncClient, agent_tenant: Tenant, tmp_path: Path
) -> None:
    async with gateway_session(client, agent_tenant.api_key, tmp_path) as session:
        # No currency: the block requires it, so the policy cannot decide.
        result = await session.agent.call_tool("transfer", {"amount": 5})
    assert result.is_error
    assert "SERVICE_POLICY_MISSING_CONTEXT" in text(result)
    assert result.meta is not None
    assert result.meta[DECISION_META] == "SILENCE"
    assert session.received() == []


async def test_an_unannotated_tool_is_destructive_to_the_policy(
    client: httpx.AsyncClient, agent_tenant: Tenant, tmp_path: Path
) -> None:
    async with gateway_session(client, agent_tenant.api_key, tmp_path) as session:
        result = await session.agent.call_tool("delete_everything", {"confirm": True})
    assert result.is_error
    assert "SERVICE_POLICY_DESTRUCTIVE_TOOL" in text(result)
    assert session.received() == []


async def test_a_tool_no_policy_governs_is_refused(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    # The deploys policy governs deploy.* only: mcp.files.read_file is surface_not_found.
    tenant = await make_tenant(client)
    async with gateway_session(client, tenant.api_key, tmp_path) as session:
        result = await session.agent.call_tool("read_file", {"path": "README.md"})
    assert result.is_error
    assert "surface_not_found" in text(result)
    assert session.received() == []


async def test_a_call_is_refused_when_the_service_cannot_be_reached(
    client: httpx.AsyncClient, agent_tenant: Tenant, tmp_path: Path
) -> None:
    async with gateway_session(
        client,
        agent_tenant.api_key,
        tmp_path,
        transport=httpx.AsyncHTTPTransport(),
        base_url="http://127.0.0.1:9",
    ) as session:
        result = await session.agent.call_tool("read_file", {"path": "README.md"})
    assert result.is_error
    assert "unreachable" in text(result)
    assert session.received() == []


class TamperingTransport(httpx.AsyncBaseTransport):
    """The app, with each execute answer's ``rule_id`` changed after signing."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.url.path != "/v1/execute":
            return response
        body = json.loads(await response.aread())
        body["rule_id"] = "something-else"
        return httpx.Response(response.status_code, json=body)


async def test_a_permit_that_does_not_verify_is_refused(
    client: httpx.AsyncClient, agent_tenant: Tenant, tmp_path: Path
) -> None:
    tampering = TamperingTransport(client._transport)
    async with gateway_session(
        client, agent_tenant.api_key, tmp_path, transport=tampering
    ) as session:
        result = await session.agent.call_tool("read_file", {"path": "README.md"})
    assert result.is_error
    assert "bad_signature" in text(result)
    assert session.received() == []


async def test_a_tool_name_becomes_a_surface_segment_and_stays_in_the_context(
    client: httpx.AsyncClient, agent_tenant: Tenant, tmp_path: Path
) -> None:
    async with gateway_session(client, agent_tenant.api_key, tmp_path) as session:
        result = await session.agent.call_tool("Web.Search", {"query": "execauth"})
    assert not result.is_error, text(result)
    assert session.received() == [{"tool": "Web.Search", "arguments": {"query": "execauth"}}]


async def test_the_mapping_file_names_the_surface_of_a_tool(
    client: httpx.AsyncClient, agent_tenant: Tenant, tmp_path: Path
) -> None:
    # read_file decided as the transfer surface: its policy requires an amount, so SILENCE.
    mapped = ToolMap(surfaces={"read_file": "mcp.files.transfer"})
    async with gateway_session(client, agent_tenant.api_key, tmp_path, tool_map=mapped) as session:
        result = await session.agent.call_tool("read_file", {"path": "README.md"})
    assert result.is_error
    assert "SERVICE_POLICY_MISSING_CONTEXT" in text(result)
    assert session.received() == []


async def test_tools_list_shows_every_tool_without_a_policy_file(
    client: httpx.AsyncClient, agent_tenant: Tenant, tmp_path: Path
) -> None:
    async with gateway_session(client, agent_tenant.api_key, tmp_path) as session:
        listed = await session.agent.list_tools()
    names = {tool.name for tool in listed.tools}
    assert names == {"read_file", "transfer", "delete_everything", "Web.Search"}


async def test_tools_list_hides_the_tools_the_policy_always_denies(
    client: httpx.AsyncClient, agent_tenant: Tenant, tmp_path: Path
) -> None:
    policy = tmp_path / "agent.yaml"
    policy.write_text(AGENT_POLICY)
    hidden = always_denied_by_files(policy)
    async with gateway_session(client, agent_tenant.api_key, tmp_path, hidden=hidden) as session:
        listed = await session.agent.list_tools()
    assert "delete_everything" not in {tool.name for tool in listed.tools}
    assert "transfer" in {tool.name for tool in listed.tools}


async def test_a_hidden_tool_called_anyway_is_still_refused_by_the_service(
    client: httpx.AsyncClient, agent_tenant: Tenant, tmp_path: Path
) -> None:
    policy = tmp_path / "agent.yaml"
    policy.write_text(AGENT_POLICY)
    async with gateway_session(
        client, agent_tenant.api_key, tmp_path, hidden=always_denied_by_files(policy)
    ) as session:
        result = await session.agent.call_tool("delete_everything", {"confirm": True})
    assert result.is_error
    assert "SERVICE_POLICY_DESTRUCTIVE_TOOL" in text(result)
    assert session.received() == []


ESCALATE_POLICY = """\
surfaces:
  - match: mcp.files.delete_everything
    rules:
      - id: a-person-decides
        escalate: context.destructiveHint
"""


async def test_a_call_the_policy_escalates_never_reaches_the_server(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    tenant = await make_tenant(client, policy=ESCALATE_POLICY)
    async with gateway_session(client, tenant.api_key, tmp_path) as session:
        result = await session.agent.call_tool("delete_everything", {"confirm": True})
    assert result.is_error
    assert "ESCALATE" in text(result)
    assert session.received() == []


async def test_a_permit_verified_against_pinned_keys_goes_through(
    client: httpx.AsyncClient, agent_tenant: Tenant, tmp_path: Path
) -> None:
    published = (await client.get("/.well-known/service-keys.json")).json()
    async with gateway_session(
        client, agent_tenant.api_key, tmp_path, keys=KeyList.from_document(published)
    ) as session:
        result = await session.agent.call_tool("read_file", {"path": "README.md"})
    assert not result.is_error, text(result)
    assert len(session.received()) == 1


async def test_a_permit_signed_by_a_key_not_pinned_is_refused(
    client: httpx.AsyncClient, agent_tenant: Tenant, tmp_path: Path
) -> None:
    published = (await client.get("/.well-known/service-keys.json")).json()
    pinned = KeyList.from_document(published | {"keys": []})
    async with gateway_session(client, agent_tenant.api_key, tmp_path, keys=pinned) as session:
        result = await session.agent.call_tool("read_file", {"path": "README.md"})
    assert result.is_error
    assert "unknown_key" in text(result)
    assert session.received() == []


async def approve_when_pending(
    client: httpx.AsyncClient, admin_key: str, agent_told: anyio.Event
) -> None:
    """A second client (a person with the org's admin key) approves the pending call, once
    the agent has been told, by a progress notification, that its call is waiting."""
    auth = {"Authorization": f"Bearer {admin_key}"}
    with anyio.fail_after(30):
        await agent_told.wait()
    pending = (await client.get("/operator/approvals", headers=auth)).json()
    items = pending.get("items", pending.get("approvals", []))
    assert len(items) == 1, pending
    approved = await client.post(
        f"/operator/approvals/{items[0]['approval_id']}/approve",
        json={"actor": "person:alice", "reason": "looked at it"},
        headers=auth,
    )
    assert approved.status_code == 200, approved.text


async def test_an_escalated_call_waits_with_progress_then_proceeds_after_approval(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    tenant = await make_tenant(client, policy=ESCALATE_POLICY)
    admin = await client.post(
        f"/console/v1/orgs/{tenant.org_id}/keys",
        json={"name": "approver", "role": "admin"},
        headers=ADMIN,
    )
    assert admin.status_code == 201, admin.text
    agent_told = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        assert message is not None
        assert "approval" in message
        agent_told.set()

    async with (
        gateway_session(
            client, tenant.api_key, tmp_path, approval_wait=30, progress_every=0.2
        ) as session,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(approve_when_pending, client, admin.json()["api_key"], agent_told)
        result = await session.agent.call_tool(
            "delete_everything", {"confirm": True}, progress_callback=on_progress
        )
    assert not result.is_error, text(result)
    assert result.meta is not None
    assert result.meta[DECISION_META] == "PERMIT"
    assert session.received() == [{"tool": "delete_everything", "arguments": {"confirm": True}}]


async def test_an_escalated_call_not_approved_in_time_never_reaches_the_server(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    tenant = await make_tenant(client, policy=ESCALATE_POLICY)
    async with gateway_session(client, tenant.api_key, tmp_path, approval_wait=1) as session:
        result = await session.agent.call_tool("delete_everything", {"confirm": True})
    assert result.is_error
    assert "ESCALATE" in text(result)
    assert "did not come within 1s" in text(result)
    assert session.received() == []
