"""``execauth mcp`` as an agent's MCP client configuration runs it: a real process between a
real MCP client session and tools_server.py, in front of a real ``execauth serve``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from execauth.agents.gateway import RECEIPT_ID_META
from tests.agents.conftest import ACTOR, AGENT_POLICY, TOOLS_SERVER, received
from tests.cli.conftest import RunningService, service
from tests.serving import free_port

__all__ = ["service"]

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

EXECAUTH = str(Path(sys.executable).parent / "execauth")


@pytest.fixture(scope="module")
def api_key(service: RunningService) -> str:
    admin = {"Authorization": f"Bearer {service.admin_token}"}
    org = httpx.post(f"{service.url}/console/v1/orgs", json={"name": "Agents"}, headers=admin)
    org_id = org.json()["org_id"]
    key = httpx.post(
        f"{service.url}/console/v1/orgs/{org_id}/keys", json={"name": "mcp"}, headers=admin
    )
    published = httpx.put(
        f"{service.url}/console/v1/orgs/{org_id}/policies/agent",
        content=AGENT_POLICY,
        headers=admin,
    )
    assert published.status_code == 201, published.text
    api_key: str = key.json()["api_key"]
    return api_key


def gateway_command(service: RunningService, api_key: str, calls: Path) -> StdioServerParameters:
    """What an MCP client configuration file says: run ``execauth mcp -- python server.py``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXECAUTH_")}
    env |= {
        "EXECAUTH_URL": service.url,
        "EXECAUTH_API_KEY": api_key,
        "TOOLS_SERVER_CALLS": str(calls),
    }
    return StdioServerParameters(
        command=EXECAUTH,
        args=[
            "mcp",
            "--actor",
            ACTOR,
            "--server",
            "files",
            "--",
            sys.executable,
            str(TOOLS_SERVER),
        ],
        env=env,
    )


async def test_the_command_lets_a_permitted_call_through_and_refuses_a_denied_one(
    service: RunningService, api_key: str, tmp_path: Path
) -> None:
    calls = tmp_path / "calls.jsonl"
    async with Client(gateway_command(service, api_key, calls)) as agent:
        permitted = await agent.call_tool("read_file", {"path": "README.md"})
        denied = await agent.call_tool("transfer", {"amount": 5000, "currency": "EUR"})
    assert not permitted.is_error
    assert permitted.meta is not None
    assert permitted.meta[RECEIPT_ID_META].startswith("service_rcpt_")
    assert denied.is_error
    assert isinstance(denied.content[0], types.TextContent)
    assert "SERVICE_POLICY_AMOUNT_TOO_LARGE" in denied.content[0].text
    assert received(calls) == [{"tool": "read_file", "arguments": {"path": "README.md"}}]


def test_the_command_without_an_api_key_is_a_usage_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXECAUTH_")}
    done = subprocess.run(
        [EXECAUTH, "mcp", "--actor", ACTOR, "--", sys.executable, str(TOOLS_SERVER)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "EXECAUTH_API_KEY" in done.stderr


def test_the_command_without_an_actor_is_a_usage_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXECAUTH_")}
    done = subprocess.run(
        [EXECAUTH, "mcp", "--", sys.executable, str(TOOLS_SERVER)],
        env=env | {"EXECAUTH_API_KEY": "service_live_x"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--actor" in done.stderr


@pytest.fixture
def remote_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """tools_server.py over streamable HTTP on a free port: its URL and its calls file."""
    port, calls = free_port(), tmp_path / "calls.jsonl"
    env = dict(os.environ) | {"TOOLS_SERVER_CALLS": str(calls)}
    process = subprocess.Popen(
        [sys.executable, str(TOOLS_SERVER), "--http", str(port)], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:  # readiness, not logic: wait until it accepts connections
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, "the MCP server exited"
                assert time.monotonic() < deadline, "the MCP server did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", calls
    finally:
        process.terminate()
        process.wait(timeout=30)


async def test_the_command_gates_a_remote_server_over_streamable_http(
    service: RunningService, api_key: str, remote_server: tuple[str, Path]
) -> None:
    url, calls = remote_server
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXECAUTH_")}
    env |= {"EXECAUTH_URL": service.url, "EXECAUTH_API_KEY": api_key}
    command = StdioServerParameters(
        command=EXECAUTH,
        args=["mcp", "--actor", ACTOR, "--server", "files", "--remote", url],
        env=env,
    )
    async with Client(command) as agent:
        permitted = await agent.call_tool("read_file", {"path": "README.md"})
        denied = await agent.call_tool("delete_everything", {"confirm": True})
    assert not permitted.is_error
    assert denied.is_error
    assert received(calls) == [{"tool": "read_file", "arguments": {"path": "README.md"}}]


def test_a_command_and_a_remote_server_together_are_a_usage_error() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXECAUTH_")}
    done = subprocess.run(
        [EXECAUTH, "mcp", "--actor", ACTOR, "--remote", "http://127.0.0.1:9/mcp",
         "--", sys.executable, str(TOOLS_SERVER)],
        env=env | {"EXECAUTH_API_KEY": "service_live_x"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "one of them" in done.stderr


async def test_the_maps_actor_is_the_actor_of_each_decision(
    service: RunningService, api_key: str, tmp_path: Path
) -> None:
    # The policy permits read_file to "agent:" actors only: a person's name matches no rule.
    mapping = tmp_path / "map.yaml"
    mapping.write_text("server: files\nactor: person:bob\n")
    calls = tmp_path / "calls.jsonl"
    command = gateway_command(service, api_key, calls)
    args = ["mcp", "--map", str(mapping), "--", sys.executable, str(TOOLS_SERVER)]
    async with Client(command.model_copy(update={"args": args})) as agent:
        result = await agent.call_tool("read_file", {"path": "README.md"})
    assert result.is_error
    assert isinstance(result.content[0], types.TextContent)
    assert "SERVICE_POLICY_NO_MATCHING_RULE" in result.content[0].text
    assert received(calls) == []


def test_a_keys_file_that_is_not_a_key_list_is_a_usage_error(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text('{"not": "keys"}')
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXECAUTH_")}
    done = subprocess.run(
        [EXECAUTH, "mcp", "--actor", ACTOR, "--keys", str(keys),
         "--", sys.executable, str(TOOLS_SERVER)],
        env=env | {"EXECAUTH_API_KEY": "service_live_x"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "not a key list" in done.stderr
