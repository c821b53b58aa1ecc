"""examples/agents/hooks.py: the two tool-hook patterns against a real service.

With examples/policies/agent-tools.yaml: a short web search is permitted, sending an
email is not (its agent.tool.* block denies every unlisted tool); a refused tool's body
never runs, in both patterns, and a service that cannot be asked refuses too.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from execauth_client import Client

from tests.cli.conftest import RunningService
from tests.examples.conftest import EXAMPLES, example_env, provision
from tests.module_files import load_module_file

pytestmark = pytest.mark.e2e

HOOKS = EXAMPLES / "agents" / "hooks.py"


hooks = load_module_file("agents_hooks_example", HOOKS)


@pytest.fixture(scope="module")
def api_key(service: RunningService) -> str:
    return provision(service, "agent-tools.yaml")


@pytest.fixture
def client(service: RunningService, api_key: str) -> Iterator[Client]:
    hooks.SENT.clear()
    with Client(service.url, api_key) as client:
        yield client


def test_a_wrapped_tool_runs_under_a_permit(client: Client) -> None:
    tools = hooks.build_wrapped_tools(client)
    assert tools["web_search"](query="receipts") == "3 results for 'receipts'"


def test_a_wrapped_tool_the_policy_denies_does_not_run(client: Client) -> None:
    tools = hooks.build_wrapped_tools(client)
    answer = tools["send_email"](to="all@example.com", body="hi")
    assert answer.startswith("not run: DENY (SERVICE_POLICY_TOOL_NOT_ALLOWED)")
    assert hooks.SENT == []


def test_the_hook_allows_a_permitted_call_with_its_receipt(client: Client) -> None:
    answer = hooks.PreToolHook(hooks.ToolGate(client, hooks.ACTOR))("web_search", {"query": "x"})
    assert answer["permissionDecision"] == "allow"
    assert answer["receipt_id"].startswith("service_rcpt_")


def test_the_hook_denies_and_the_tool_does_not_run(client: Client) -> None:
    hook = hooks.PreToolHook(hooks.ToolGate(client, hooks.ACTOR))
    answer = hooks.run_with_hook(
        hook, hooks.plain_tools(), "send_email", {"to": "all@example.com", "body": "hi"}
    )
    assert "SERVICE_POLICY_TOOL_NOT_ALLOWED" in answer
    assert hooks.SENT == []


def test_the_hook_denies_when_the_service_cannot_be_asked(api_key: str) -> None:
    hooks.SENT.clear()
    with Client("http://127.0.0.1:9", api_key, max_retries=0) as offline:
        hook = hooks.PreToolHook(hooks.ToolGate(offline, hooks.ACTOR))
        answer = hooks.run_with_hook(hook, hooks.plain_tools(), "web_search", {"query": "x"})
    assert answer.startswith("not run:")


def test_the_example_runs_its_plan(service: RunningService, api_key: str) -> None:
    result = subprocess.run(
        [sys.executable, str(HOOKS)], env=example_env(service, api_key),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == lines[3] == "3 results for 'execauth receipts'"
    assert sum(line.startswith("not run: DENY") for line in lines) == 2
