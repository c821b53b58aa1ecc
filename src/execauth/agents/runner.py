"""Run the gateway: the agent on our stdio; the upstream MCP server a child on stdio, or a
remote server over streamable HTTP."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from execauth_client import AsyncClient, KeyList
from mcp import Client as UpstreamClient
from mcp import StdioServerParameters
from mcp.server.stdio import stdio_server

from execauth.agents.gateway import Gateway
from execauth.agents.tool_map import ToolMap

API_KEY_ENV = "EXECAUTH_API_KEY"


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """What ``execauth mcp`` was told: the child command (or the remote server's URL), who
    the agent is, where to ask."""

    command: Sequence[str]
    actor: str
    url: str
    api_key: str
    tool_map: ToolMap
    server: str | None = None
    hidden: Callable[[str], bool] = lambda surface: False
    timeout: float = 10.0
    remote: str | None = None  # a streamable-HTTP MCP server instead of ``command``
    keys: KeyList | None = None  # a pinned key list (``--keys``)
    approval_wait: float = 60.0  # seconds an escalated call waits for its approval


def child_parameters(command: Sequence[str]) -> StdioServerParameters:
    """The child MCP server gets our environment, except the execauth API key: the server
    it wraps has no business asking for decisions in the agent's name."""
    env = {name: value for name, value in os.environ.items() if name != API_KEY_ENV}
    return StdioServerParameters(command=command[0], args=list(command[1:]), env=env)


def server_name(settings: GatewaySettings, reported: str | None) -> str:
    """The ``<server>`` of default surfaces: the flag, the mapping file, what the child
    calls itself, else its command's file name (or the remote server's host name)."""
    fallback = (
        urlsplit(settings.remote).hostname or "remote"
        if settings.remote
        else Path(settings.command[0]).name
    )
    return settings.server or settings.tool_map.server or reported or fallback


def upstream_client(settings: GatewaySettings) -> UpstreamClient:
    """The MCP client to the server that does the work."""
    if settings.remote:
        return UpstreamClient(settings.remote)
    return UpstreamClient(child_parameters(settings.command))


async def serve_stdio(settings: GatewaySettings) -> None:
    """Serve one agent on stdin/stdout until it disconnects."""
    async with (
        AsyncClient(settings.url, settings.api_key, timeout=settings.timeout) as execauth,
        upstream_client(settings) as upstream,
    ):
        reported = upstream.server_info.name if upstream.server_info else None
        gateway = Gateway(
            upstream=upstream,
            execauth=execauth,
            server=server_name(settings, reported),
            actor=settings.actor,
            tool_map=settings.tool_map,
            hidden=settings.hidden,
            keys=settings.keys,
            approval_wait=settings.approval_wait,
        )
        server = gateway.mcp_server()
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
