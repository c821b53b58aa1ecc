"""``execauth gate`` against a real ``execauth serve`` while people decide (docs/approvals.md).

Each test runs gate as a subprocess, as a CI job would; a second client (an admin key of
the organization, through the operator API) approves or rejects while gate waits.
"""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serving import EXECAUTH, clean_env, free_port, running_service

pytestmark = pytest.mark.e2e

POLICY = """
surfaces:
  - match: deploy.production
    rules:
      - id: a-person-decides
        escalate: "true"
        approval_ttl: 30m
        ttl: 10m
  - match: deploy.hurried
    rules:
      - id: nobody-has-time
        escalate: "true"
        approval_ttl: 2s
  - match: deploy.frozen
    rules:
      - id: freeze
        deny: "true"
        reason: SERVICE_POLICY_FREEZE
"""
# Generous: gate and the server share a loaded 2-core machine with other test runs.
GATE_EXIT_SECONDS = 120
APPROVAL_SHOWS_SECONDS = 60
COMMAND_STATUS = 7  # the command's own, so "gate exited with it" cannot be a coincidence


@dataclass(frozen=True)
class Service:
    url: str
    requester: dict[str, str]  # gate's environment: EXECAUTH_URL, EXECAUTH_API_KEY
    approver: dict[str, str]  # an admin key's Authorization header


@dataclass(frozen=True)
class Gate:
    process: subprocess.Popen[str]
    run_id: str
    marker: Path
    receipt_file: Path

    def wait(self) -> tuple[int, str]:
        _, stderr = self.process.communicate(timeout=GATE_EXIT_SECONDS)
        return self.process.returncode, stderr

    def receipt(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.receipt_file.read_bytes())
        return document


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    workdir = tmp_path_factory.mktemp("gate-e2e")
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
        org = httpx.post(url + "/console/v1/orgs", json={"name": "G"}, headers=admin)
        assert org.status_code == 201, org.text
        keys = f"{url}/console/v1/orgs/{org.json()['org_id']}/keys"
        ci = httpx.post(keys, json={"name": "ci"}, headers=admin)
        alice = httpx.post(keys, json={"name": "alice", "role": "admin"}, headers=admin)
        assert ci.status_code == alice.status_code == 201, (ci.text, alice.text)
        published = httpx.put(
            f"{url}/console/v1/orgs/{org.json()['org_id']}/policies/deploys",
            content=POLICY,
            headers=admin,
        )
        assert published.status_code == 201, published.text
        yield Service(
            url,
            {"EXECAUTH_URL": url, "EXECAUTH_API_KEY": ci.json()["api_key"]},
            {"Authorization": f"Bearer {alice.json()['api_key']}"},
        )


def start_gate(
    service: Service, tmp_path: Path, surface: str, *flags: str, run_id: str | None = None
) -> Gate:
    """gate in front of a command that records the receipt id it got and exits 7.

    ``run_id`` (in the context) finds the request's approval; the same one repeats a request.
    """
    run_id = run_id or uuid.uuid4().hex
    marker = tmp_path / "ran"
    receipt_file = tmp_path / "receipt.json"
    script = (
        "import os, sys; "
        f"open({str(marker)!r}, 'w').write(os.environ.get('EXECAUTH_RECEIPT_ID', '')); "
        f"sys.exit({COMMAND_STATUS})"
    )
    process = subprocess.Popen(
        [EXECAUTH, "gate", "--surface", surface, "--actor", "release-bot",
         "--context", f"run={run_id}", "--receipt-file", str(receipt_file),
         "--timeout", "60", *flags, "--", sys.executable, "-c", script],
        env=clean_env(**service.requester), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=_ctrl_c_as_in_a_terminal,
    )  # fmt: skip
    return Gate(process, run_id, marker, receipt_file)


def _ctrl_c_as_in_a_terminal() -> None:
    """Give the gate SIGINT's default action, as a shell gives a command it runs.

    A test run started in the background (``cmd &`` in a script, ``nohup``) has SIGINT
    ignored, every child inherits that, and a Python started so never turns Ctrl-C into
    ``KeyboardInterrupt``: the Ctrl-C test would then measure how it was launched.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def pending_approval(service: Service, gate: Gate) -> str:
    """The id of the approval gate's request opened, once the operator list shows it."""
    deadline = time.monotonic() + APPROVAL_SHOWS_SECONDS
    while time.monotonic() < deadline:
        listed = httpx.get(service.url + "/operator/approvals", headers=service.approver)
        assert listed.status_code == 200, listed.text
        for item in listed.json()["items"]:
            if (item.get("context") or {}).get("run") == gate.run_id:
                return str(item["approval_id"])
        if gate.process.poll() is not None:
            pytest.fail("gate ended before its approval was listed: " + gate.wait()[1])
        time.sleep(0.2)
    gate.process.kill()
    pytest.fail("gate's approval never showed in the operator list: " + gate.wait()[1])


def vote(service: Service, approval_id: str, verb: str) -> dict[str, Any]:
    answer = httpx.post(
        f"{service.url}/operator/approvals/{approval_id}/{verb}",
        json={"reason": "reviewed in the e2e test", "actor": "alice@example.test"},
        headers=service.approver,
    )
    assert answer.status_code == 200, answer.text
    document: dict[str, Any] = answer.json()
    return document


def test_approved_while_gate_waits_runs_the_command_under_the_linked_permit(
    service: Service, tmp_path: Path
) -> None:
    gate = start_gate(service, tmp_path, "deploy.production", "--approval-timeout", "60s")
    approval_id = pending_approval(service, gate)
    decided = vote(service, approval_id, "approve")
    status, stderr = gate.wait()
    assert status == COMMAND_STATUS, stderr
    permit = gate.receipt()
    assert permit["decision"] == "PERMIT"
    assert permit["approval_id"] == approval_id
    assert permit["approval_outcome"] == "approved"
    assert permit["receipt_id"] == decided["outcome_receipt"]["receipt_id"]
    assert gate.marker.read_text() == permit["receipt_id"]
    assert "approved by alice@example.test" in stderr


def test_rejected_while_gate_waits_exits_79_without_running_the_command(
    service: Service, tmp_path: Path
) -> None:
    gate = start_gate(service, tmp_path, "deploy.production", "--approval-timeout", "60s")
    vote(service, pending_approval(service, gate), "reject")
    status, stderr = gate.wait()
    assert status == 79, stderr
    assert not gate.marker.exists()
    assert gate.receipt()["decision"] == "DENY"
    assert gate.receipt()["approval_outcome"] == "rejected"


def test_approval_expiring_while_gate_waits_exits_80_without_running_the_command(
    service: Service, tmp_path: Path
) -> None:
    gate = start_gate(service, tmp_path, "deploy.hurried", "--approval-timeout", "60s")
    status, stderr = gate.wait()
    assert status == 80, stderr
    assert not gate.marker.exists()
    assert gate.receipt()["approval_outcome"] == "expired"


def test_approval_timeout_while_still_pending_exits_81_and_keeps_the_escalate(
    service: Service, tmp_path: Path
) -> None:
    gate = start_gate(service, tmp_path, "deploy.production", "--approval-timeout", "2s")
    status, stderr = gate.wait()
    assert status == 81, stderr
    assert not gate.marker.exists()
    assert gate.receipt()["decision"] == "ESCALATE"
    assert "--idempotency-key" in stderr  # how to resume waiting


def test_gate_resumes_waiting_with_the_same_idempotency_key(
    service: Service, tmp_path: Path
) -> None:
    key = f"resume-{uuid.uuid4()}"
    (tmp_path / "first").mkdir()
    first = start_gate(service, tmp_path / "first", "deploy.production",
                       "--approval-timeout", "1s", "--idempotency-key", key)  # fmt: skip
    assert first.wait()[0] == 81
    approval_id = first.receipt()["approval_id"]
    vote(service, approval_id, "approve")
    again = start_gate(service, tmp_path, "deploy.production", "--idempotency-key", key,
                       run_id=first.run_id)  # fmt: skip
    status, stderr = again.wait()
    assert status == COMMAND_STATUS, stderr
    assert again.receipt()["approval_id"] == approval_id


def test_ctrl_c_while_waiting_exits_130_without_running_the_command(
    service: Service, tmp_path: Path
) -> None:
    gate = start_gate(service, tmp_path, "deploy.production", "--approval-timeout", "60s")
    pending_approval(service, gate)
    gate.process.send_signal(signal.SIGINT)
    status, stderr = gate.wait()
    assert status == 130, stderr
    assert not gate.marker.exists()


def test_observe_runs_the_command_on_a_deny_and_exits_with_its_status(
    service: Service, tmp_path: Path
) -> None:
    gate = start_gate(service, tmp_path, "deploy.frozen", "--observe")
    status, stderr = gate.wait()
    assert status == COMMAND_STATUS, stderr
    assert gate.marker.read_text() == ""  # ran, and was handed no receipt
    assert gate.receipt()["decision"] == "DENY"
    assert "WITHOUT PERMISSION" in stderr
