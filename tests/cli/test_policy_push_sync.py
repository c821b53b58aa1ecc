"""``execauth policy push | sync PATH`` against a real ``execauth serve`` (policy issue, item 6).

Either credential: ``--org`` with the platform admin token (console API), or without it
the organization's own admin key from ``EXECAUTH_API_KEY`` (operator API). Every file is
checked offline first; nothing is sent unless all pass. ``sync`` publishes only what
changed and prints what it did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import Result

from tests.cli.conftest import RunningService
from tests.cli.test_admin_cli import issue_key, new_org, run, run_json
from tests.conftest import DEPLOY_POLICY

pytestmark = pytest.mark.e2e

CANARY = """\
surfaces:
  - match: deploy.canary
    rules:
      - id: anyone
        permit: "true"
"""


def policies_dir(tmp_path: Path, **documents: str) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir(exist_ok=True)
    for name, text in documents.items():
        (directory / f"{name}.yaml").write_text(text)
    return directory


def as_org_admin(service: RunningService, org_id: str, *args: str) -> Result:
    """Run with the org's own admin key and no platform admin token."""
    secret = issue_key(service, org_id, "--role", "admin")["api_key"]
    return run(service, *args, env={"EXECAUTH_API_KEY": secret, "EXECAUTH_ADMIN_TOKEN": None})


def latest(service: RunningService, org_id: str) -> dict[str, Any]:
    listed = run_json(service, "policy", "list", org_id)["policies"]
    return {p["policy_id"]: p["version"] for p in listed}


def test_push_of_a_directory_publishes_every_policy_with_the_admin_token(
    service: RunningService, tmp_path: Path
) -> None:
    org_id = new_org(service)
    directory = policies_dir(tmp_path, deploys=DEPLOY_POLICY, canary=CANARY)
    result = run(service, "policy", "push", str(directory), "--org", org_id)
    assert result.exit_code == 0, result.output
    assert latest(service, org_id) == {"canary": 1, "deploys": 1}


def test_push_works_with_an_org_admin_key_alone(service: RunningService, tmp_path: Path) -> None:
    org_id = new_org(service)
    directory = policies_dir(tmp_path, canary=CANARY)
    result = as_org_admin(service, org_id, "policy", "push", str(directory))
    assert result.exit_code == 0, result.output
    assert "published canary v1" in result.stdout
    assert latest(service, org_id) == {"canary": 1}


def test_push_without_any_credential_is_a_usage_error(
    service: RunningService, tmp_path: Path
) -> None:
    directory = policies_dir(tmp_path, canary=CANARY)
    result = run(service, "policy", "push", str(directory), env={"EXECAUTH_API_KEY": None})
    assert result.exit_code == 2
    assert "EXECAUTH_API_KEY" in result.stderr


def test_push_sends_nothing_when_one_file_is_refused(
    service: RunningService, tmp_path: Path
) -> None:
    org_id = new_org(service)
    typo = CANARY.replace('"true"', 'contxt.branch == "main"')
    directory = policies_dir(tmp_path, deploys=DEPLOY_POLICY, canary=typo)
    result = run(service, "policy", "push", str(directory), "--org", org_id)
    assert result.exit_code == 1
    assert f"{directory / 'canary.yaml'}:5: rule anyone" in result.stderr
    assert "'contxt'" in result.stderr
    assert latest(service, org_id) == {}


def test_push_of_one_file_under_another_id(service: RunningService, tmp_path: Path) -> None:
    org_id = new_org(service)
    directory = policies_dir(tmp_path, canary=CANARY)
    file = str(directory / "canary.yaml")
    result = run(service, "policy", "push", file, "--org", org_id, "--policy-id", "early")
    assert result.exit_code == 0, result.output
    assert latest(service, org_id) == {"early": 1}


def test_sync_publishes_only_what_changed_and_says_what_it_did(
    service: RunningService, tmp_path: Path
) -> None:
    org_id = new_org(service)
    directory = policies_dir(tmp_path, deploys=DEPLOY_POLICY, canary=CANARY)
    assert run(service, "policy", "sync", str(directory), "--org", org_id).exit_code == 0
    # Reformatting is no change; a new rule is.
    (directory / "deploys.yaml").write_text("# comment\n" + DEPLOY_POLICY)
    (directory / "canary.yaml").write_text(CANARY + "      - id: nobody\n        deny: 'false'\n")
    result = run(service, "policy", "sync", str(directory), "--org", org_id)
    assert result.exit_code == 0, result.output
    assert "published canary v2 (was v1)" in result.stdout
    assert "unchanged deploys v1" in result.stdout
    assert "1 published, 1 unchanged" in result.stdout
    assert latest(service, org_id) == {"canary": 2, "deploys": 1}


def test_sync_with_an_org_admin_key_creates_new_policies(
    service: RunningService, tmp_path: Path
) -> None:
    org_id = new_org(service)
    directory = policies_dir(tmp_path, canary=CANARY)
    result = as_org_admin(service, org_id, "policy", "sync", str(directory))
    assert result.exit_code == 0, result.output
    assert "published canary v1 (new)" in result.stdout


def test_sync_dry_run_publishes_nothing(service: RunningService, tmp_path: Path) -> None:
    org_id = new_org(service)
    directory = policies_dir(tmp_path, canary=CANARY)
    result = run(service, "policy", "sync", str(directory), "--org", org_id, "--dry-run")
    assert result.exit_code == 0, result.output
    assert "would publish canary (new)" in result.stdout
    assert latest(service, org_id) == {}


def test_sync_names_published_policies_missing_from_the_directory(
    service: RunningService, tmp_path: Path
) -> None:
    org_id = new_org(service)
    first = policies_dir(tmp_path, deploys=DEPLOY_POLICY, canary=CANARY)
    assert run(service, "policy", "sync", str(first), "--org", org_id).exit_code == 0
    (first / "deploys.yaml").unlink()
    result = run(service, "policy", "sync", str(first), "--org", org_id)
    assert "kept deploys v1: not in" in result.stdout
