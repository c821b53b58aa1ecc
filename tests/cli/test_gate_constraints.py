"""``execauth gate`` under a bound grant: the command runs only when the PERMIT's
``allowed_commands`` names it (docs/receipts.md, "Constraints"); else exit 82 and the
command never starts. Decisions come from a real ``execauth serve``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner, Result

from execauth.cli import app
from tests.cli.conftest import RunningService

pytestmark = pytest.mark.e2e

EX_COMMAND_NOT_ALLOWED = 82
# Records that it ran: the marker file a refused command never writes.
RECORD_RUN = "import sys; open(sys.argv[1], 'w').write('ran')"


def _policy() -> str:
    # argv[0] as gate runs it: the interpreter path, exactly.
    return f"""\
surfaces:
  - match: tools.python
    rules:
      - id: python-only
        permit: "true"
        constraints: {{allowed_commands: [{json.dumps(sys.executable)}]}}
  - match: tools.git
    rules:
      - id: git-only
        permit: "true"
        constraints: {{allowed_commands: [git, [make, deploy]]}}
"""


@pytest.fixture(scope="module")
def env(service: RunningService) -> dict[str, str]:
    admin = {"Authorization": f"Bearer {service.admin_token}"}
    org = httpx.post(f"{service.url}/console/v1/orgs", json={"name": "Bound"}, headers=admin)
    org_id = org.json()["org_id"]
    key = httpx.post(
        f"{service.url}/console/v1/orgs/{org_id}/keys", json={"name": "ci"}, headers=admin
    )
    policy = httpx.put(
        f"{service.url}/console/v1/orgs/{org_id}/policies/tools", content=_policy(), headers=admin
    )
    assert policy.status_code == 201, policy.text
    return {"EXECAUTH_URL": service.url, "EXECAUTH_API_KEY": key.json()["api_key"]}


def gate(env: dict[str, str], surface: str, marker: Path, *flags: str) -> Result:
    command = ["--", sys.executable, "-c", RECORD_RUN, str(marker)]
    return CliRunner().invoke(app, ["gate", "--surface", surface, *flags, *command], env=env)


def test_a_command_the_grant_names_runs(env: dict[str, str], tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    result = gate(env, "tools.python", marker)
    assert result.exit_code == 0, result.output
    assert marker.read_text() == "ran"


def test_a_command_outside_allowed_commands_never_runs(env: dict[str, str], tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    result = gate(env, "tools.git", marker)
    assert result.exit_code == EX_COMMAND_NOT_ALLOWED, result.output
    assert "constraint_exceeded:allowed_commands" in result.output
    assert not marker.exists()


def test_observe_runs_a_command_outside_the_grant_and_says_so(
    env: dict[str, str], tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    result = gate(env, "tools.git", marker, "--observe")
    assert result.exit_code == 0, result.output
    assert "constraint_exceeded:allowed_commands" in result.output
    assert marker.read_text() == "ran"
