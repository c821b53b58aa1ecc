"""``execauth gate`` never runs the command on an ESCALATE (a real server decides)."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from execauth.cli import app
from tests.serving import clean_env, free_port, running_service

pytestmark = pytest.mark.e2e

POLICY = """
surfaces:
  - match: deploy.production
    rules:
      - id: a-person-decides
        escalate: "true"
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    workdir = tmp_path_factory.mktemp("gate-escalate")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    token = "service_admin_" + secrets.token_urlsafe(32)
    settings = clean_env(
        EXECAUTH_DATABASE_URL=f"sqlite:///{workdir / 'execauth.db'}",
        EXECAUTH_ISSUER=url,
        EXECAUTH_ADMIN_TOKEN=token,
    )
    with running_service(settings, workdir, port):
        admin = {"Authorization": f"Bearer {token}"}
        org_id = httpx.post(url + "/console/v1/orgs", json={"name": "G"}, headers=admin).json()[
            "org_id"
        ]
        key = httpx.post(
            f"{url}/console/v1/orgs/{org_id}/keys", json={"name": "ci"}, headers=admin
        ).json()["api_key"]
        published = httpx.put(
            f"{url}/console/v1/orgs/{org_id}/policies/deploys", content=POLICY, headers=admin
        )
        assert published.status_code == 201, published.text
        yield {"EXECAUTH_URL": url, "EXECAUTH_API_KEY": key}


def test_gate_exits_77_on_escalate_and_does_not_run_the_command(
    env: dict[str, str], tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    command = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    result = CliRunner().invoke(
        app,
        ["gate", "--timeout", "60", "--surface", "deploy.production", "--actor", "release-bot",
         *command],
        env=env,
    )  # fmt: skip
    assert result.exit_code == 77, (result.output, result.stderr)
    assert not marker.exists()
    assert "ESCALATE" in result.stderr
