"""The gateway between a real MCP client session and a real MCP server, in front of the app.

The agent is the MCP SDK's ``Client`` connected to the gateway's server in-process; the
gateway reaches the upstream ``tools_server.py`` over real stdio and the service through
``execauth_client.AsyncClient`` on the in-process app (``tests/conftest.py``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from execauth_client import AsyncClient, KeyList
from mcp import Client, StdioServerParameters

from execauth.agents.gateway import Gateway
from execauth.agents.tool_map import ToolMap
from tests.conftest import Database

TOOLS_SERVER = Path(__file__).with_name("tools_server.py")
ACTOR = "agent:test-7"

AGENT_POLICY = """\
description: what the test agent may do through the MCP gateway
surfaces:
  - match: mcp.files.read_file
    require: [payload.path]
    rules:
      - id: read-only-inside
        permit: >-
          actor.startsWith("agent:") && context.readOnlyHint
          && !payload.path.contains("..")
      - id: parent-directory
        deny: payload.path.contains("..")
        reason: SERVICE_POLICY_ARGUMENT_NOT_ALLOWED
        message: No parent directories
  - match: mcp.files.transfer
    require: [payload.amount, payload.currency]
    rules:
      - id: small-euro-transfers
        permit: payload.amount <= 100 && payload.currency == "EUR"
      - id: too-large
        deny: payload.amount > 100
        reason: SERVICE_POLICY_AMOUNT_TOO_LARGE
        message: Transfers above 100 need a person
  - match: mcp.files.delete_everything
    rules:
      - id: destructive
        deny: context.destructiveHint
        reason: SERVICE_POLICY_DESTRUCTIVE_TOOL
        message: Destructive tools are not for agents
  - match: mcp.files.web_search
    rules:
      - id: search
        permit: context.tool == "Web.Search"
"""


def upstream_parameters(calls: Path) -> StdioServerParameters:
    env = dict(os.environ) | {"TOOLS_SERVER_CALLS": str(calls)}
    return StdioServerParameters(command=sys.executable, args=[str(TOOLS_SERVER)], env=env)


def received(calls: Path) -> list[dict[str, Any]]:
    """Every call the upstream server received, in order."""
    if not calls.exists():
        return []
    return [json.loads(line) for line in calls.read_text().splitlines()]


@dataclass
class Session:
    agent: Client
    gateway: Gateway
    calls: Path

    def received(self) -> list[dict[str, Any]]:
        return received(self.calls)


@asynccontextmanager
async def gateway_session(
    app_client: httpx.AsyncClient,
    api_key: str,
    tmp_path: Path,
    *,
    tool_map: ToolMap | None = None,
    hidden: Callable[[str], bool] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    base_url: str | None = None,
    keys: KeyList | None = None,
    approval_wait: float = 0.0,
    progress_every: float = 5.0,
) -> AsyncIterator[Session]:
    """An agent's MCP session through a gateway to ``tools_server.py``."""
    calls = tmp_path / "calls.jsonl"
    execauth = AsyncClient(
        base_url or str(app_client.base_url),
        api_key,
        transport=transport or app_client._transport,
        max_retries=0,
    )
    async with execauth, Client(upstream_parameters(calls)) as upstream:
        gateway = Gateway(
            upstream=upstream,
            execauth=execauth,
            server="files",
            actor=ACTOR,
            tool_map=tool_map or ToolMap(),
            hidden=hidden or (lambda surface: False),
            keys=keys,
            approval_wait=approval_wait,
            progress_every=progress_every,
        )
        async with Client(gateway.mcp_server()) as agent:
            yield Session(agent, gateway, calls)


@pytest.fixture
def database(tmp_path: Path) -> Database:
    """SQLite only: the gateway is an HTTP client of the service, whose storage is tested on
    both backends elsewhere; each test here also starts an MCP server process."""
    return Database(f"sqlite:///{tmp_path / 'execauth.db'}", None)
