"""examples/agent/agent.py: an agent's tools run only under a verified PERMIT.

The example's own ``build_tools`` and ``call_tool`` against a real service with
examples/policies/agent-tools.yaml; each refused call is shown not to have run.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from execauth_client import Client

from tests.cli.conftest import RunningService
from tests.examples.conftest import EXAMPLES, example_env, provision
from tests.module_files import load_module_file

pytestmark = pytest.mark.e2e

AGENT = EXAMPLES / "agent" / "agent.py"


agent = load_module_file("agent_example", AGENT)


@pytest.fixture(scope="module")
def api_key(service: RunningService) -> str:
    return provision(service, "agent-tools.yaml")


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The directory the agent works in: a file to list and a build/ to (not) delete."""
    work = tmp_path / "repo"
    (work / "build").mkdir(parents=True)
    (work / "README.md").write_text("hello\n")
    monkeypatch.chdir(work)
    return work


@pytest.fixture
def tools(service: RunningService, api_key: str) -> Iterator[dict[str, Any]]:
    with Client(service.url, api_key) as client:
        yield agent.build_tools(client)


def test_an_allowed_command_runs(tools: dict[str, Any], repo: Path) -> None:
    assert "README.md" in agent.call_tool(tools, "shell", {"argv": ["ls"]})


def test_a_command_outside_the_allow_list_does_not_run(tools: dict[str, Any], repo: Path) -> None:
    answer = agent.call_tool(tools, "shell", {"argv": ["rm", "-rf", "build"]})
    assert answer.startswith("not run: DENY")
    assert "SERVICE_POLICY_TOOL_NOT_ALLOWED" in answer
    assert (repo / "build").is_dir()


def test_an_allowed_command_on_a_parent_directory_does_not_run(
    tools: dict[str, Any], repo: Path
) -> None:
    (repo.parent / ".env").write_text("SECRET=1\n")
    answer = agent.call_tool(tools, "shell", {"argv": ["cat", "../.env"]})
    assert "SERVICE_POLICY_ARGUMENT_NOT_ALLOWED" in answer
    assert "SECRET" not in answer


def test_a_tool_the_policy_does_not_list_does_not_run(tools: dict[str, Any], repo: Path) -> None:
    answer = agent.call_tool(tools, "write_file", {"path": "NOTES.md", "text": "x"})
    assert "This tool is not allowed for agents" in answer
    assert not (repo / "NOTES.md").exists()


def test_no_tool_runs_when_the_service_cannot_be_asked(api_key: str, repo: Path) -> None:
    with Client("http://127.0.0.1:9", api_key, max_retries=0) as client:
        offline = agent.build_tools(client)
        answer = agent.call_tool(offline, "write_file", {"path": "NOTES.md", "text": "x"})
    assert answer.startswith("not run:")
    assert not (repo / "NOTES.md").exists()


def test_the_example_runs_its_plan(service: RunningService, api_key: str, repo: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(AGENT)], cwd=repo, env=example_env(service, api_key),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    transcript = result.stdout.splitlines()
    assert transcript[0] == "> shell({'argv': ['ls']})"
    assert "README.md" in transcript
    assert sum(line.startswith("not run: DENY") for line in transcript) == 3
    assert (repo / "build").is_dir()
