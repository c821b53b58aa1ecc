"""``execauth org | key | policy | usage`` against a real ``execauth serve`` (docs/api.md,
"Exit codes of the command line").

Exit 0 on success, 1 when the service refuses or cannot be reached, 2 on a usage error;
the admin token comes only from ``EXECAUTH_ADMIN_TOKEN``.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from typer.testing import CliRunner, Result

from execauth.cli import app
from execauth.cli.console_client import parse_duration
from tests.cli.conftest import RunningService
from tests.conftest import DEPLOY_POLICY

pytestmark = pytest.mark.e2e

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
DENY = {**PERMIT, "context": {"branch": "dev"}}
T = TypeVar("T")


def run(service: RunningService, *args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), env={**service.cli_env, **(env or {})})


def run_json(service: RunningService, *args: str) -> Any:
    return stdout_json(service, *args, "--json")


def stdout_json(service: RunningService, *args: str) -> Any:
    """Run a command whose stdout is JSON (``--json``, or ``usage export --format json``)."""
    result = run(service, *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def new_org(service: RunningService, name: str = "Acme") -> str:
    org_id: str = run_json(service, "org", "create", name)["org_id"]
    return org_id


def push_policy(service: RunningService, org_id: str, tmp_path: Path, text: str) -> Result:
    path = tmp_path / "deploys.yaml"
    path.write_text(text)
    return run(service, "policy", "push", str(path), "--org", org_id)


def issue_key(service: RunningService, org_id: str, *args: str) -> dict[str, Any]:
    key: dict[str, Any] = run_json(service, "key", "issue", org_id, "--name", "ci", *args)
    return key


def execute(service: RunningService, api_key: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        service.url + "/v1/execute", json=body, headers={"Authorization": f"Bearer {api_key}"}
    )


def eventually(probe: Callable[[], T], done: Callable[[T], bool], seconds: float = 5.0) -> T:
    """Poll ``probe`` until ``done`` holds (caches and the batching writer lag a little)."""
    deadline = time.monotonic() + seconds
    value = probe()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.1)
        value = probe()
    return value


@pytest.fixture
def tenant(service: RunningService, tmp_path: Path) -> tuple[str, str]:
    """A fresh org with the deploy policy published and an execute key: (org_id, secret)."""
    org_id = new_org(service)
    assert push_policy(service, org_id, tmp_path, DEPLOY_POLICY).exit_code == 0
    return org_id, issue_key(service, org_id)["api_key"]


# --- org ---------------------------------------------------------------------------


def test_created_org_appears_in_list_json(service: RunningService) -> None:
    org_id = new_org(service, "Globex")
    orgs = {o["org_id"]: o for o in run_json(service, "org", "list")["orgs"]}
    assert orgs[org_id]["name"] == "Globex"


def test_org_created_without_a_plan_is_unmetered(service: RunningService) -> None:
    assert run_json(service, "org", "show", new_org(service))["plan"] == "unmetered"


def test_org_create_plan_names_the_plan(service: RunningService) -> None:
    created = run_json(service, "org", "create", "Hooli", "--plan", "free")
    assert created["plan"] == "free"


def test_org_list_prints_a_table_by_default(service: RunningService) -> None:
    org_id = new_org(service, "Initech")
    result = run(service, "org", "list")
    assert result.exit_code == 0, result.output
    assert org_id in result.stdout
    assert "Initech" in result.stdout


def test_tables_print_names_literally_not_as_markup(service: RunningService) -> None:
    result = run(service, "org", "show", new_org(service, "[bold]Umbrella[/bold]"))
    assert "[bold]Umbrella[/bold]" in result.stdout


def test_set_plan_changes_the_plan(service: RunningService) -> None:
    org_id = new_org(service)
    assert run_json(service, "org", "set-plan", org_id, "standard")["plan"] == "standard"
    assert run_json(service, "org", "show", org_id)["plan"] == "standard"


def test_unknown_plan_is_refused_with_the_servers_message(service: RunningService) -> None:
    result = run(service, "org", "set-plan", new_org(service), "platinum")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: invalid_request: unknown plan 'platinum'")


def test_disabled_org_is_enabled_again(service: RunningService) -> None:
    org_id = new_org(service)
    assert run_json(service, "org", "disable", org_id)["disabled"] is True
    assert run_json(service, "org", "enable", org_id)["disabled"] is False


def test_unknown_org_prints_the_error_code_and_exits_1(service: RunningService) -> None:
    result = run(service, "org", "show", "org_doesnotexist")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: not_found: no such organization"


# --- key ---------------------------------------------------------------------------


def test_key_issue_prints_the_secret_once_with_a_notice(service: RunningService) -> None:
    result = run(service, "key", "issue", new_org(service), "--name", "deployer")
    assert result.exit_code == 0, result.output
    secret_lines = [line for line in result.stdout.splitlines() if line.startswith("api_key: ")]
    assert len(secret_lines) == 1
    secret = secret_lines[0].removeprefix("api_key: ")
    assert result.stdout.count(secret) == 1
    assert "shown once" in result.stdout


def test_key_list_never_shows_the_secret(service: RunningService) -> None:
    org_id = new_org(service)
    secret = issue_key(service, org_id)["api_key"]
    listed = run(service, "key", "list", org_id, "--json")
    assert listed.exit_code == 0, listed.output
    assert secret not in listed.output
    assert all("api_key" not in key for key in json.loads(listed.stdout)["keys"])
    assert secret not in run(service, "key", "list", org_id).output


def test_key_issue_sends_role_and_surfaces(service: RunningService) -> None:
    org_id = new_org(service)
    issue_key(service, org_id, "--role", "auditor", "--surface", "deploy.*", "--surface", "db.*")
    (key,) = run_json(service, "key", "list", org_id)["keys"]
    assert (key["role"], key["surfaces"]) == ("auditor", ["deploy.*", "db.*"])


def test_issued_key_executes_after_policy_push(
    service: RunningService, tenant: tuple[str, str]
) -> None:
    response = execute(service, tenant[1], PERMIT)
    assert response.status_code == 200, response.text
    assert response.json()["decision"] == "PERMIT"


def test_rotated_key_has_a_new_secret_and_the_old_one_works_during_grace(
    service: RunningService, tenant: tuple[str, str]
) -> None:
    org_id, old_secret = tenant
    (key,) = run_json(service, "key", "list", org_id)["keys"]
    rotated = run_json(service, "key", "rotate", org_id, key["key_id"], "--grace", "1h")
    assert rotated["api_key"] != old_secret
    assert rotated["previous_valid_until"]
    assert execute(service, rotated["api_key"], PERMIT).status_code == 200
    assert execute(service, old_secret, PERMIT).status_code == 200


def test_revoked_key_gets_401(service: RunningService, tenant: tuple[str, str]) -> None:
    org_id, secret = tenant
    (key,) = run_json(service, "key", "list", org_id)["keys"]
    result = run(service, "key", "revoke", org_id, key["key_id"])
    assert result.exit_code == 0, result.output
    response = eventually(
        lambda: execute(service, secret, PERMIT), lambda r: r.status_code == 401, seconds=2.0
    )
    assert response.status_code == 401


def test_revoking_an_unknown_key_exits_1(service: RunningService) -> None:
    result = run(service, "key", "revoke", new_org(service), "key_nope")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: not_found:")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("15m", 900), ("24h", 86_400), ("7d", 604_800), ("90", 90)],
)
def test_durations_parse_to_seconds(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


def test_bad_grace_duration_is_a_usage_error(service: RunningService) -> None:
    assert run(service, "key", "rotate", "org_x", "key_x", "--grace", "soon").exit_code == 2


def test_bad_expiry_timestamp_is_a_usage_error(service: RunningService) -> None:
    result = run(service, "key", "issue", "org_x", "--name", "ci", "--expires-at", "tomorrow")
    assert result.exit_code == 2


# --- policy ------------------------------------------------------------------------


def test_invalid_policy_push_exits_1_and_shows_the_reason(
    service: RunningService, tmp_path: Path
) -> None:
    broken = DEPLOY_POLICY.replace('context.branch == "main"', 'context.branch ==== "main"')
    result = push_policy(service, new_org(service), tmp_path, broken)
    assert result.exit_code == 1
    assert "CEL does not compile" in result.stderr  # checked offline, as publishing checks
    assert f"{tmp_path / 'deploys.yaml'}:" in result.stderr
    assert "main-only" in result.stderr


def test_policy_push_of_a_missing_file_is_a_usage_error(
    service: RunningService, tmp_path: Path
) -> None:
    result = run(service, "policy", "push", str(tmp_path / "nope.yaml"), "--org", "org_x")
    assert result.exit_code == 2


def test_policy_push_json_reports_the_version_and_hash(
    service: RunningService, tmp_path: Path
) -> None:
    path = tmp_path / "deploys.yml"
    path.write_text(DEPLOY_POLICY)
    published = run_json(service, "policy", "push", str(path), "--org", new_org(service))
    assert published["policy_id"] == "deploys"
    assert published["version"] == 1
    assert published["policy_hash"].startswith("sha256:")


def test_policy_list_shows_the_latest_version(
    service: RunningService, tenant: tuple[str, str]
) -> None:
    (policy,) = run_json(service, "policy", "list", tenant[0])["policies"]
    assert (policy["policy_id"], policy["version"]) == ("deploys", 1)


def test_policy_show_source_prints_the_published_text(
    service: RunningService, tenant: tuple[str, str]
) -> None:
    result = run(service, "policy", "show", tenant[0], "deploys", "--version", "1", "--source")
    assert result.exit_code == 0, result.output
    assert result.stdout == DEPLOY_POLICY


def test_unknown_policy_version_exits_1(service: RunningService, tenant: tuple[str, str]) -> None:
    assert run(service, "policy", "show", tenant[0], "deploys", "--version", "9").exit_code == 1


# --- usage -------------------------------------------------------------------------


def test_usage_counts_executes_by_decision(
    service: RunningService, tenant: tuple[str, str]
) -> None:
    org_id, secret = tenant
    for body in (PERMIT, PERMIT, DENY):
        assert execute(service, secret, body).status_code == 200
    usage = eventually(
        lambda: run_json(service, "usage", org_id), lambda u: u["executes"]["total"] >= 3
    )
    assert usage["executes"]["by_decision"] == {"PERMIT": 2, "DENY": 1, "SILENCE": 0}
    assert usage["executes"]["by_surface"]["deploy.production"]["total"] == 3
    assert usage["quota"]["used"] == 3


def test_usage_prints_tables_by_default(service: RunningService, tenant: tuple[str, str]) -> None:
    result = run(service, "usage", tenant[0])
    assert result.exit_code == 0, result.output
    assert "quota" in result.stdout


def test_usage_export_csv_has_a_header_and_the_orgs_row(
    service: RunningService, tenant: tuple[str, str], tmp_path: Path
) -> None:
    org_id, secret = tenant
    assert execute(service, secret, PERMIT).status_code == 200
    month = time.strftime("%Y-%m", time.gmtime())
    out = tmp_path / "usage.csv"

    def export() -> list[dict[str, str]]:
        result = run(service, "usage", "export", "--month", month, "-o", str(out))
        assert result.exit_code == 0, result.output
        return list(csv.DictReader(io.StringIO(out.read_text())))

    def counted(rows: list[dict[str, str]]) -> bool:
        return any(r["org_id"] == org_id and r["executes"] == "1" for r in rows)

    rows = eventually(export, counted)
    assert out.read_text().splitlines()[0] == (
        "month,org_id,name,plan,executes,permit,deny,silence,quota_limit"
    )
    row = next(r for r in rows if r["org_id"] == org_id)
    assert row == {
        "month": month, "org_id": org_id, "name": "Acme", "plan": "unmetered", "executes": "1",
        "permit": "1", "deny": "0", "silence": "0", "quota_limit": "",
    }  # fmt: skip


def test_usage_export_json_is_the_services_answer(
    service: RunningService, tenant: tuple[str, str]
) -> None:
    month = time.strftime("%Y-%m", time.gmtime())
    export = stdout_json(service, "usage", "export", "--format", "json")
    assert export["month"] == month
    assert tenant[0] in {o["org_id"] for o in export["orgs"]}


def test_bad_month_is_a_usage_error(service: RunningService) -> None:
    assert run(service, "usage", "export", "--month", "2026-13").exit_code == 2


# --- the environment ---------------------------------------------------------------


def test_missing_admin_token_is_a_usage_error(service: RunningService) -> None:
    result = run(service, "org", "list", env={"EXECAUTH_ADMIN_TOKEN": None})
    assert result.exit_code == 2
    assert "EXECAUTH_ADMIN_TOKEN" in result.stderr


def test_wrong_admin_token_exits_1_unauthorized(service: RunningService) -> None:
    result = run(service, "org", "list", env={"EXECAUTH_ADMIN_TOKEN": "service_admin_wrong"})
    assert result.exit_code == 1
    assert result.stderr.startswith("error: unauthorized:")


def test_unreachable_service_exits_1(service: RunningService) -> None:
    result = run(service, "org", "list", "--url", "http://127.0.0.1:9")
    assert result.exit_code == 1
    assert "cannot reach" in result.stderr


def test_url_comes_from_the_environment(service: RunningService) -> None:
    result = run(service, "org", "list", env={"EXECAUTH_URL": "http://127.0.0.1:9"})
    assert result.exit_code == 1
