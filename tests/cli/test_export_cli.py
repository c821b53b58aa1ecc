"""``execauth export``: streamed to a file, progress on a terminal only, ``--timeout``, and
no file left behind by an export that failed."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner, Result

from execauth.cli import app
from tests.cli.conftest import RunningService
from tests.serving import provision_org

pytestmark = pytest.mark.e2e

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


def export(service: RunningService, *args: str, **env: str) -> Result:
    return CliRunner().invoke(app, ["export", *args], env={**service.cli_env, **env})


@pytest.fixture(scope="module")
def org_id(service: RunningService) -> str:
    """An organization with three sequenced receipts."""
    org, _, secret = provision_org(service.url, service.admin_token)
    for _ in range(3):
        response = httpx.post(
            service.url + "/v1/execute", json=PERMIT, headers={"Authorization": f"Bearer {secret}"}
        )
        assert response.status_code == 200
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        bundle = httpx.get(
            f"{service.url}/console/v1/orgs/{org}/export",
            headers={"Authorization": f"Bearer {service.admin_token}"},
        ).json()
        if bundle["tree_size"] == 3:
            return org
        time.sleep(0.2)
    raise AssertionError("the receipts were not sequenced")


def test_export_writes_the_bundle_and_reports_its_counts(
    service: RunningService, org_id: str, tmp_path: Path
) -> None:
    out = tmp_path / "bundle.json"
    result = export(service, "--org", org_id, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"wrote {out}: 3 receipts, log size 3"
    assert len(json.loads(out.read_text())["receipts"]) == 3


def test_export_shows_no_progress_when_stderr_is_not_a_terminal(
    service: RunningService, org_id: str, tmp_path: Path
) -> None:
    result = export(service, "--org", org_id, "-o", str(tmp_path / "b.json"))
    assert result.stderr == ""


def test_export_shows_progress_on_a_terminal(
    service: RunningService, org_id: str, tmp_path: Path
) -> None:
    # Rich treats FORCE_COLOR as "this is a terminal".
    result = export(service, "--org", org_id, "-o", str(tmp_path / "b.json"), FORCE_COLOR="1")
    assert result.exit_code == 0, result.output
    assert "exporting 3 receipts" in result.stderr


def test_a_failed_export_leaves_no_file(service: RunningService, tmp_path: Path) -> None:
    out = tmp_path / "bundle.json"
    result = export(service, "--org", "org_" + "0" * 26, "-o", str(out))
    assert result.exit_code == 1
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_output_exits_1_and_leaves_no_partial_file(
    service: RunningService, org_id: str, tmp_path: Path
) -> None:
    out = tmp_path / "missing-dir" / "bundle.json"
    result = export(service, "--org", org_id, "-o", str(out))
    assert result.exit_code == 1
    assert "cannot write" in result.stderr
    assert not out.parent.exists()


def test_timeout_below_one_second_is_a_usage_error(service: RunningService, tmp_path: Path) -> None:
    result = export(service, "--org", "org_x", "-o", str(tmp_path / "b.json"), "--timeout", "0")
    assert result.exit_code == 2


def test_an_unanswering_service_fails_after_the_timeout(tmp_path: Path) -> None:
    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        result = CliRunner().invoke(
            app,
            ["export", "--org", "org_x", "-o", str(tmp_path / "b.json"), "--timeout", "1"],
            env={"EXECAUTH_URL": url, "EXECAUTH_ADMIN_TOKEN": "service_admin_x"},
        )
        elapsed = time.monotonic() - started
    assert result.exit_code == 1
    assert elapsed < 10
    assert list(tmp_path.iterdir()) == []
