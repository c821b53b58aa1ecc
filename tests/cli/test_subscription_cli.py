"""``execauth subscription`` against a real ``execauth serve``."""

from __future__ import annotations

import json

import httpx
import pytest
from typer.testing import CliRunner, Result

from execauth.cli import app
from tests.cli.conftest import RunningService

pytestmark = pytest.mark.e2e


def run(service: RunningService, *args: str) -> Result:
    return CliRunner().invoke(app, list(args), env=service.cli_env)


@pytest.fixture(scope="module")
def org_id(service: RunningService) -> str:
    created = httpx.post(
        f"{service.url}/console/v1/orgs",
        json={"name": "Streams"},
        headers={"Authorization": f"Bearer {service.admin_token}"},
    )
    assert created.status_code == 201, created.text
    return str(created.json()["org_id"])


def test_create_prints_the_webhook_secret_once_and_list_shows_the_stream(
    service: RunningService, org_id: str
) -> None:
    made = run(
        service, "subscription", "create", org_id, "--name", "siem",
        "--webhook", "https://siem.example/hook", "--json",
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    created = json.loads(made.stdout)
    assert created["secret"].startswith("whsec_")
    listed = run(service, "subscription", "list", org_id, "--json")
    assert listed.exit_code == 0, listed.output
    streams = json.loads(listed.stdout)["subscriptions"]
    assert [s["subscription_id"] for s in streams] == [created["subscription_id"]]
    assert "whsec_" not in listed.stdout


def test_pause_resume_and_delete(service: RunningService, org_id: str) -> None:
    made = run(
        service, "subscription", "create", org_id, "--name", "x",
        "--webhook", "https://a.example/", "--start", "beginning", "--json",
    )  # fmt: skip
    subscription_id = json.loads(made.stdout)["subscription_id"]
    paused = run(service, "subscription", "pause", org_id, subscription_id, "--json")
    assert json.loads(paused.stdout)["state"] == "paused"
    resumed = run(
        service, "subscription", "resume", org_id, subscription_id, "--start", "0", "--json"
    )
    assert json.loads(resumed.stdout)["state"] == "active"
    assert run(service, "subscription", "delete", org_id, subscription_id).exit_code == 0
    assert run(service, "subscription", "show", org_id, subscription_id).exit_code == 1


def test_exactly_one_sink_is_required(service: RunningService, org_id: str) -> None:
    neither = run(service, "subscription", "create", org_id, "--name", "x")
    assert neither.exit_code == 2
    both = run(
        service, "subscription", "create", org_id, "--name", "x",
        "--webhook", "https://a.example/", "--nats", "a.b",
    )  # fmt: skip
    assert both.exit_code == 2


def test_a_nats_stream_without_a_nats_server_is_refused(
    service: RunningService, org_id: str
) -> None:
    refused = run(service, "subscription", "create", org_id, "--name", "x", "--nats", "a.b")
    assert refused.exit_code == 1
    assert "EXECAUTH_NATS_URL" in refused.output
