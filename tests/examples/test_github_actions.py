"""examples/github-actions/deploy.yml and the composite action it uses (action.yml).

The workflow cannot run here; the action's gate step can. The workflow's step is taken
from its YAML as written, its ``with:`` values filled in as GitHub would; the action's
defaults and its gate step's ``env`` come from action.yml as written; the step's ``run``
then runs with the runner's shell and variables in a checkout holding the pinned key
list and a stand-in ``deploy/production.sh``. The install step needs a package index
and is checked for what it installs instead: this repository at the pinned commit.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.cli.conftest import RunningService
from tests.examples.conftest import EXAMPLES, example_env, provision

pytestmark = pytest.mark.e2e

REPOSITORY = EXAMPLES.parent
WORKFLOW = EXAMPLES / "github-actions" / "deploy.yml"
ACTION = REPOSITORY / "action.yml"
EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")
DEPLOY_SCRIPT = """#!/usr/bin/env bash
set -euo pipefail
echo "$EXECAUTH_RECEIPT_ID" > deployed
"""


@dataclass(frozen=True)
class StepRun:
    returncode: int
    stderr: str
    stdout: str
    outputs: dict[str, str]
    summary: str


def workflow_step() -> dict[str, Any]:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    steps = workflow["jobs"]["production"]["steps"]
    (step,) = [s for s in steps if "/execauth@" in s.get("uses", "")]
    return dict(step)


def action() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(ACTION.read_text())
    return document


def action_step(step_id: str) -> dict[str, Any]:
    (step,) = [s for s in action()["runs"]["steps"] if s.get("id") == step_id]
    return dict(step)


def fill(text: str, values: dict[str, str]) -> str:
    return EXPRESSION.sub(lambda m: values[m.group(1)], text)


@pytest.fixture(scope="module")
def api_key(service: RunningService) -> str:
    return provision(service, "deploys.yaml")


@pytest.fixture
def checkout(tmp_path: Path, service: RunningService) -> Path:
    (tmp_path / ".execauth").mkdir()
    (tmp_path / ".execauth" / "service-keys.json").write_bytes(
        httpx.get(service.url + "/.well-known/service-keys.json").content
    )
    (tmp_path / "deploy").mkdir()
    script = tmp_path / "deploy" / "production.sh"
    script.write_text(DEPLOY_SCRIPT)
    script.chmod(0o755)
    (tmp_path / "runner-temp").mkdir()
    return tmp_path


def run_gate(
    service: RunningService,
    api_key: str,
    checkout: Path,
    *,
    branch: str,
    ticket: str = "CHG-1234",
    **overrides: str,
) -> StepRun:
    """The workflow's action step, as the runner runs the action's gate step."""
    temp = checkout / "runner-temp"
    github = {
        "github.actor": "release-bot",
        "github.ref_name": branch,
        "github.sha": "4f2a9c1e" * 5,
        "github.server_url": "https://github.com",
        "github.repository": "acme/app",
        "github.run_id": "4242",
        "runner.temp": str(temp),
        "vars.EXECAUTH_URL": service.url,
        "secrets.EXECAUTH_API_KEY": api_key,
        "inputs.change_ticket": ticket,
    }
    given = {k: fill(str(v), github) for k, v in workflow_step()["with"].items()} | overrides
    declared = action()["inputs"]
    assert set(given) <= set(declared), "the workflow passes an input the action lacks"
    assert all(name in given for name, spec in declared.items() if spec.get("required"))
    inputs = {
        n: given.get(n, fill(str(spec.get("default", "")), github)) for n, spec in declared.items()
    }
    context = github | {f"inputs.{n}": v for n, v in inputs.items()}
    context["steps.install.outputs.bin"] = str(Path(sys.executable).parent / "execauth")
    step = action_step("gate")
    outputs, summary = temp / "github-output", temp / "step-summary"
    env = example_env(service, "unused") | {
        k: fill(str(v), context) for k, v in step["env"].items()
    }
    env |= {
        "GITHUB_ACTION_PATH": str(REPOSITORY),
        "GITHUB_OUTPUT": str(outputs),
        "GITHUB_STEP_SUMMARY": str(summary),
        "RUNNER_TEMP": str(temp),
    }
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=checkout,
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    written = outputs.read_text() if outputs.exists() else ""
    pairs = (line.partition("=") for line in written.splitlines())
    return StepRun(
        done.returncode,
        done.stderr,
        done.stdout,
        {key: value for key, _, value in pairs},
        summary.read_text() if summary.exists() else "",
    )


def kept_receipt(checkout: Path) -> dict[str, Any]:
    receipt: dict[str, Any] = json.loads(
        (checkout / "runner-temp" / "execauth-receipt.json").read_text()
    )
    return receipt


def test_the_workflow_pins_the_action_to_a_full_commit() -> None:
    reference = workflow_step()["uses"].partition("@")[2].split()[0]
    assert re.fullmatch(r"[0-9a-f]{40}", reference)


def test_the_action_passes_inputs_to_its_scripts_only_through_env() -> None:
    # ${{ }} inside `run` is pasted into the script before bash sees it: shell injection.
    for step in action()["runs"]["steps"]:
        assert "${{" not in step["run"]
    assert action_step("gate")["env"]["EXECAUTH_API_KEY"] == "${{ inputs.api-key }}"


def test_the_action_installs_this_repository_at_the_pinned_commit() -> None:
    script = (REPOSITORY / "scripts" / "action-install.sh").read_text()
    assert '-r "$source_dir/requirements/runtime.lock"' in script
    assert '--no-deps "$source_dir"' in script
    assert 'source_dir="${GITHUB_ACTION_PATH:?}"' in script


def test_a_deploy_from_main_with_a_ticket_runs_under_a_permit(
    service: RunningService, api_key: str, checkout: Path
) -> None:
    result = run_gate(service, api_key, checkout, branch="main")
    assert result.returncode == 0, result.stderr
    receipt = kept_receipt(checkout)
    assert receipt["decision"] == "PERMIT"
    assert receipt["rule_id"] == "release-from-main"
    assert (checkout / "deployed").read_text().strip() == receipt["receipt_id"]
    assert result.outputs["decision"] == "PERMIT"
    assert result.outputs["receipt-id"] == receipt["receipt_id"]


def test_a_deploy_from_another_branch_fails_the_step_and_keeps_the_deny(
    service: RunningService, api_key: str, checkout: Path
) -> None:
    result = run_gate(service, api_key, checkout, branch="feature/x")
    assert result.returncode == 77
    assert "SERVICE_POLICY_WRONG_BRANCH" in result.stderr
    assert kept_receipt(checkout)["decision"] == "DENY"
    assert not (checkout / "deployed").exists()
    assert result.outputs["decision"] == "DENY"


def test_a_receipt_from_a_key_not_pinned_in_the_repository_fails_the_step(
    service: RunningService, api_key: str, checkout: Path
) -> None:
    (checkout / ".execauth" / "service-keys.json").write_text('{"keys": []}')
    result = run_gate(service, api_key, checkout, branch="main")
    assert result.returncode == 65
    assert "unknown_key" in result.stderr
    assert not (checkout / "deployed").exists()
    assert result.outputs["decision"] == "NONE"


def test_observe_mode_records_a_deny_and_does_not_block(
    service: RunningService, api_key: str, checkout: Path
) -> None:
    result = run_gate(service, api_key, checkout, branch="feature/x", mode="observe")
    assert result.returncode == 0, result.stderr
    assert (checkout / "deployed").exists()
    assert result.outputs["decision"] == "DENY"
    assert result.outputs["gate-status"] == "77"
    assert kept_receipt(checkout)["decision"] == "DENY"
    assert "DENY" in result.summary
    assert "::warning::" in result.stdout


def test_observe_mode_does_not_block_when_the_service_is_unreachable(
    service: RunningService, api_key: str, checkout: Path
) -> None:
    result = run_gate(
        service, api_key, checkout, branch="main", mode="observe", url="http://127.0.0.1:9"
    )
    assert result.returncode == 0, result.stderr
    assert (checkout / "deployed").exists()
    assert result.outputs["decision"] == "NONE"
    assert result.outputs["gate-status"] == "69"


def test_enforce_mode_fails_closed_when_the_service_is_unreachable(
    service: RunningService, api_key: str, checkout: Path
) -> None:
    result = run_gate(service, api_key, checkout, branch="main", url="http://127.0.0.1:9")
    assert result.returncode == 69
    assert not (checkout / "deployed").exists()


def test_an_unknown_mode_is_a_usage_error_and_runs_nothing(
    service: RunningService, api_key: str, checkout: Path
) -> None:
    result = run_gate(service, api_key, checkout, branch="main", mode="audit")
    assert result.returncode == 2
    assert not (checkout / "deployed").exists()


def test_the_approval_timeout_input_reaches_gate(
    service: RunningService, api_key: str, checkout: Path
) -> None:
    # gate refuses a duration it cannot read before asking anything: the input got there.
    result = run_gate(service, api_key, checkout, branch="main", **{"approval-timeout": "soon"})
    assert result.returncode == 2
    assert "approval-timeout" in result.stderr
    assert not (checkout / "deployed").exists()


def test_observe_mode_never_waits_for_an_approval(
    service: RunningService, api_key: str, checkout: Path
) -> None:
    result = run_gate(
        service, api_key, checkout, branch="main", mode="observe", **{"approval-timeout": "soon"}
    )
    assert result.returncode == 0, result.stderr
    assert result.outputs["decision"] == "PERMIT"
