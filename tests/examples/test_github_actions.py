"""examples/github-actions/deploy.yml: the gate step, run as a runner would run it.

The workflow itself cannot run here; its ``execauth gate`` step can. It is taken from
the YAML as written, its ``${{ }}`` env values filled in as GitHub would, and run with
the runner's shell and variables in a checkout holding the pinned key list and a
stand-in ``deploy/production.sh``.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.cli.conftest import RunningService
from tests.examples.conftest import EXAMPLES, example_env, provision

pytestmark = pytest.mark.e2e

WORKFLOW = EXAMPLES / "github-actions" / "deploy.yml"
EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")
DEPLOY_SCRIPT = """#!/usr/bin/env bash
set -euo pipefail
echo "$EXECAUTH_RECEIPT_ID" > deployed
"""


def gate_step() -> dict[str, Any]:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    steps = workflow["jobs"]["production"]["steps"]
    (step,) = [s for s in steps if "execauth gate" in s.get("run", "")]
    return dict(step)


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


def run_step(
    service: RunningService, api_key: str, checkout: Path, *, branch: str, ticket: str
) -> subprocess.CompletedProcess[str]:
    """The step's ``run`` with GitHub's default shell, runner variables and step env."""
    expressions = {
        "vars.EXECAUTH_URL": service.url,
        "secrets.EXECAUTH_API_KEY": api_key,
        "inputs.change_ticket": ticket,
    }
    step = gate_step()
    step_env = {
        name: EXPRESSION.sub(lambda m: expressions[m.group(1)], value)
        for name, value in step["env"].items()
    }
    runner = {
        "GITHUB_ACTOR": "release-bot",
        "GITHUB_REF_NAME": branch,
        "GITHUB_SHA": "4f2a9c1e" * 5,
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "acme/app",
        "GITHUB_RUN_ID": "4242",
        "RUNNER_TEMP": str(checkout / "runner-temp"),
    }
    env = example_env(service, api_key) | runner | step_env
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=checkout,
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def kept_receipt(checkout: Path) -> dict[str, Any]:
    receipt: dict[str, Any] = json.loads(
        (checkout / "runner-temp" / "execauth-receipt.json").read_text()
    )
    return receipt


def test_the_gate_step_takes_event_data_only_through_env() -> None:
    # ${{ }} inside `run` is pasted into the script before bash sees it: shell injection.
    step = gate_step()
    assert "${{" not in step["run"]
    assert "EXECAUTH_API_KEY" in step["env"]
    assert "--api-key" not in step["run"]


def test_a_deploy_from_main_with_a_ticket_runs_under_a_permit(
    service: RunningService, api_key: str, checkout: Path
) -> None:
    result = run_step(service, api_key, checkout, branch="main", ticket="CHG-1234")
    assert result.returncode == 0, result.stderr
    receipt = kept_receipt(checkout)
    assert receipt["decision"] == "PERMIT"
    assert receipt["rule_id"] == "release-from-main"
    assert (checkout / "deployed").read_text().strip() == receipt["receipt_id"]


def test_a_deploy_from_another_branch_fails_the_job_and_keeps_the_deny(
    service: RunningService, api_key: str, checkout: Path
) -> None:
    result = run_step(service, api_key, checkout, branch="feature/x", ticket="CHG-1234")
    assert result.returncode == 77
    assert "SERVICE_POLICY_WRONG_BRANCH" in result.stderr
    assert kept_receipt(checkout)["decision"] == "DENY"
    assert not (checkout / "deployed").exists()


def test_a_receipt_from_a_key_not_pinned_in_the_repository_fails_the_job(
    service: RunningService, api_key: str, checkout: Path
) -> None:
    (checkout / ".execauth" / "service-keys.json").write_text('{"keys": []}')
    result = run_step(service, api_key, checkout, branch="main", ticket="CHG-1234")
    assert result.returncode == 65
    assert "unknown_key" in result.stderr
    assert not (checkout / "deployed").exists()
