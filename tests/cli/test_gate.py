"""``execauth gate``: the command runs only under a verified PERMIT for exactly this request.

Exit status (README.md, "Gate a command"): the command's own when it ran; 77 DENY, 75 SILENCE, 69
service unreachable or answered an error, 65 receipt not verified or not for this
request, 2 usage error. The command in these tests writes a marker file, so each test
shows whether it ran. Decisions come from a real ``execauth serve``; answers a real
service would never give (a replayed or forged receipt) from a scripted stand-in.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from execauth.cli import app
from execauth.keyring import (
    ActiveSigner,
    generate_signing_key,
    key_list_document,
    unseal_signer,
)
from execauth.policy.decision import Decision, Outcome, PolicyRef
from execauth.receipts import build_receipt, new_execution_id, new_receipt_id, sign_receipt
from execauth.request import parse_execute_request
from execauth.server_secret import ServerSecret
from tests.cli.conftest import RunningService
from tests.conftest import DEPLOY_POLICY
from tests.serving import EXECAUTH, free_port

pytestmark = pytest.mark.e2e

NO_BRANCH = ("--surface", "deploy.production", "--actor", "release-bot")
MAIN = (*NO_BRANCH, "--context", "branch=main")
FEATURE_BRANCH = (*NO_BRANCH, "--context", "branch=feature/x")
PERMIT_BODY = {
    "surface": "deploy.production",
    "actor": "release-bot",
    "context": {"branch": "main"},
}

# The gated command: records that it ran, its environment and the receipt it was given.
RECORD_RUN = """
import json, os, sys
path = os.environ.get("EXECAUTH_RECEIPT_FILE")
json.dump({
    "receipt_file": path,
    "receipt_id": os.environ.get("EXECAUTH_RECEIPT_ID"),
    "receipt": open(path, "rb").read().decode() if path else None,
    "receipt_mode": oct(os.stat(path).st_mode & 0o777) if path else None,
    "api_key_inherited": "EXECAUTH_API_KEY" in os.environ,
    "argv": sys.argv[2:],
}, open(sys.argv[1], "w"))
"""


@dataclass(frozen=True)
class Tenant:
    url: str
    api_key: str
    keys: bytes  # the service's key list as published

    @property
    def env(self) -> dict[str, str | None]:
        return {"EXECAUTH_URL": self.url, "EXECAUTH_API_KEY": self.api_key}


@pytest.fixture(scope="module")
def tenant(service: RunningService) -> Tenant:
    """An organization with the deploy policy and an execute key, on the real service."""
    admin = {"Authorization": f"Bearer {service.admin_token}"}
    org = httpx.post(f"{service.url}/console/v1/orgs", json={"name": "Gate"}, headers=admin)
    org_id = org.json()["org_id"]
    key = httpx.post(
        f"{service.url}/console/v1/orgs/{org_id}/keys", json={"name": "ci"}, headers=admin
    )
    policy = httpx.put(
        f"{service.url}/console/v1/orgs/{org_id}/policies/deploys",
        content=DEPLOY_POLICY,
        headers=admin,
    )
    assert policy.status_code == 201, policy.text
    keys = httpx.get(service.url + "/.well-known/service-keys.json").content
    return Tenant(service.url, key.json()["api_key"], keys)


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "ran.json"


def record_run(marker: Path, *args: str) -> list[str]:
    return ["--", sys.executable, "-c", RECORD_RUN, str(marker), *args]


def gate(env: Mapping[str, str | None], *args: str) -> Result:
    """``execauth gate ARGS`` in this process (the command it runs is a real process)."""
    return CliRunner().invoke(app, ["gate", *args], env=dict(env))


def gate_process(env: Mapping[str, str | None], *args: str, **popen: Any) -> subprocess.Popen[str]:
    """``execauth gate ARGS`` as its own process, for stdio and signals."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("EXECAUTH_")}
    full_env |= {k: v for k, v in env.items() if v is not None}
    return subprocess.Popen(
        [EXECAUTH, "gate", *args], env=full_env, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, **popen,
    )  # fmt: skip


def decide(tenant: Tenant, body: Mapping[str, Any]) -> httpx.Response:
    return httpx.post(
        tenant.url + "/v1/execute",
        json=body,
        headers={"Authorization": f"Bearer {tenant.api_key}"},
    )


# --- PERMIT: the command runs, with the receipt --------------------------------------


def test_permit_runs_the_command_with_the_receipt_file_and_id(tenant: Tenant, marker: Path) -> None:
    result = gate(tenant.env, *MAIN, *record_run(marker, "--flag", "arg"))
    assert result.exit_code == 0, result.output
    ran = json.loads(marker.read_text())
    receipt = json.loads(ran["receipt"])
    assert receipt["decision"] == "PERMIT"
    assert ran["receipt_id"] == receipt["receipt_id"]
    assert ran["receipt_mode"] == "0o600"
    assert ran["argv"] == ["--flag", "arg"]
    expected = parse_execute_request(PERMIT_BODY, None)
    assert receipt["request_digest"] == expected.digest
    assert f"PERMIT {receipt['receipt_id']}" in result.stderr


def test_the_receipt_file_holds_the_exact_bytes_the_service_signed(
    tenant: Tenant, marker: Path, tmp_path: Path
) -> None:
    kept = tmp_path / "receipt.json"
    result = gate(
        tenant.env, *MAIN, "--receipt-file", str(kept), "--idempotency-key", "gate-bytes-1",
        *record_run(marker),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    stored = decide(tenant, {**PERMIT_BODY, "idempotency_key": "gate-bytes-1"})
    assert stored.headers["Idempotent-Replayed"] == "true"
    assert kept.read_bytes() == stored.content
    assert json.loads(marker.read_text())["receipt_file"] == str(kept.resolve())


def test_the_default_receipt_file_is_removed_when_the_command_ends(
    tenant: Tenant, marker: Path
) -> None:
    assert gate(tenant.env, *MAIN, *record_run(marker)).exit_code == 0
    assert not Path(json.loads(marker.read_text())["receipt_file"]).exists()


def test_the_command_does_not_inherit_the_api_key(tenant: Tenant, marker: Path) -> None:
    assert gate(tenant.env, *MAIN, *record_run(marker)).exit_code == 0
    assert json.loads(marker.read_text())["api_key_inherited"] is False


def test_a_pinned_key_list_verifies_a_permit(tenant: Tenant, marker: Path, tmp_path: Path) -> None:
    pinned = tmp_path / "service-keys.json"
    pinned.write_bytes(tenant.keys)
    result = gate(tenant.env, *MAIN, "--keys", str(pinned), *record_run(marker))
    assert result.exit_code == 0, result.output
    assert marker.exists()


def test_gate_exits_with_the_commands_own_status(tenant: Tenant) -> None:
    result = gate(tenant.env, *MAIN, "--", sys.executable, "-c", "raise SystemExit(3)")
    assert result.exit_code == 3


def test_a_command_ended_by_signal_n_exits_128_plus_n(tenant: Tenant) -> None:
    suicide = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    result = gate(tenant.env, *MAIN, "--", sys.executable, "-c", suicide)
    assert result.exit_code == 128 + signal.SIGTERM


def test_the_command_has_gates_stdin_and_stdout(tenant: Tenant) -> None:
    upper = "import sys; sys.stdout.write(sys.stdin.read().upper())"
    process = gate_process(tenant.env, *MAIN, "--", sys.executable, "-c", upper,
                           stdin=subprocess.PIPE)  # fmt: skip
    stdout, stderr = process.communicate("ship it\n", timeout=60)
    assert process.returncode == 0, stderr
    assert stdout == "SHIP IT\n"  # gate's own words go to stderr only
    assert "PERMIT" in stderr


def test_sigterm_to_gate_reaches_the_command(tenant: Tenant, tmp_path: Path) -> None:
    ready, stopped = tmp_path / "ready", tmp_path / "stopped"
    graceful = (
        "import pathlib, signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path({str(stopped)!r}).touch(),"
        " sys.exit(7)))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(60)\n"
    )
    process = gate_process(tenant.env, *MAIN, "--", sys.executable, "-c", graceful)
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=30)
    assert process.returncode == 7
    assert stopped.exists()


# --- DENY and SILENCE: the command does not run ---------------------------------------


def test_deny_exits_77_and_does_not_run_the_command(tenant: Tenant, marker: Path) -> None:
    result = gate(tenant.env, *FEATURE_BRANCH, *record_run(marker))
    assert result.exit_code == 77
    assert not marker.exists()
    assert "DENY" in result.stderr
    assert "SERVICE_POLICY_WRONG_BRANCH: Only main can be deployed" in result.stderr


def test_silence_exits_75_and_does_not_run_the_command(tenant: Tenant, marker: Path) -> None:
    result = gate(tenant.env, *NO_BRANCH, *record_run(marker))
    assert result.exit_code == 75
    assert not marker.exists()
    assert "SERVICE_POLICY_MISSING_CONTEXT" in result.stderr


def test_a_denys_receipt_is_kept_when_asked(tenant: Tenant, marker: Path, tmp_path: Path) -> None:
    kept = tmp_path / "deny.json"
    result = gate(tenant.env, *FEATURE_BRANCH, "--receipt-file", str(kept), *record_run(marker))
    assert result.exit_code == 77
    assert json.loads(kept.read_text())["decision"] == "DENY"
    assert not marker.exists()


# --- the service unreachable or answering an error: 69 --------------------------------


def test_an_unreachable_service_exits_69(tenant: Tenant, marker: Path) -> None:
    nowhere = {**tenant.env, "EXECAUTH_URL": f"http://127.0.0.1:{free_port()}"}
    result = gate(nowhere, *MAIN, *record_run(marker))
    assert result.exit_code == 69
    assert "cannot reach the service" in result.stderr
    assert not marker.exists()


def test_a_rejected_api_key_exits_69(tenant: Tenant, marker: Path) -> None:
    stranger = {**tenant.env, "EXECAUTH_API_KEY": "service_live_not-a-real-key"}
    result = gate(stranger, *MAIN, *record_run(marker))
    assert result.exit_code == 69
    assert "401 unauthorized" in result.stderr
    assert not marker.exists()


def test_an_unknown_surface_exits_69(tenant: Tenant, marker: Path) -> None:
    result = gate(tenant.env, "--surface", "nothing.here", *record_run(marker))
    assert result.exit_code == 69
    assert "404 surface_not_found" in result.stderr
    assert not marker.exists()


# --- a receipt that is not authentic or not for this request: 65 ----------------------


def test_a_receipt_signed_by_a_key_outside_the_pinned_list_exits_65(
    tenant: Tenant, marker: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other-keys.json"
    other.write_text(json.dumps(foreign_key_list()[1]))
    result = gate(tenant.env, *MAIN, "--keys", str(other), *record_run(marker))
    assert result.exit_code == 65
    assert "unknown_key" in result.stderr
    assert not marker.exists()


def test_a_tampered_receipt_exits_65(tenant: Tenant, marker: Path) -> None:
    deny = decide(tenant, {**PERMIT_BODY, "context": {"branch": "dev"}}).json()
    forged = deny | {"decision": "PERMIT", "enforcement": "EXECUTED"}
    result = gate_answered(tenant.env, json.dumps(forged).encode(), tenant.keys, *MAIN,
                           *record_run(marker))  # fmt: skip
    assert result.exit_code == 65
    assert "bad_signature" in result.stderr
    assert not marker.exists()


def test_an_authentic_permit_for_another_request_exits_65(tenant: Tenant, marker: Path) -> None:
    elsewhere = decide(tenant, {"surface": "deploy.staging", "idempotency_key": "k1"}).content
    result = gate_answered(tenant.env, elsewhere, tenant.keys, *MAIN,
                           "--idempotency-key", "k1", *record_run(marker))  # fmt: skip
    assert result.exit_code == 65
    assert "does not match the request" in result.stderr
    assert "request_digest" in result.stderr
    assert not marker.exists()


def test_a_replayed_permit_for_the_same_request_exits_65(tenant: Tenant, marker: Path) -> None:
    earlier = decide(tenant, {**PERMIT_BODY, "idempotency_key": "an-earlier-run"}).content
    result = gate_answered(tenant.env, earlier, tenant.keys, *MAIN, *record_run(marker))
    assert result.exit_code == 65
    assert "request_id is 'an-earlier-run'" in result.stderr
    assert not marker.exists()


def test_an_expired_permit_exits_65(marker: Path) -> None:
    signed, keys = foreign_key_list()
    permit = signed_permit(signed, "run-1", issued=datetime.now(UTC) - timedelta(hours=1))
    result = gate_answered({"EXECAUTH_API_KEY": "service_live_x"}, json.dumps(permit).encode(),
                           json.dumps(keys).encode(), *MAIN, "--idempotency-key", "run-1",
                           *record_run(marker))  # fmt: skip
    assert result.exit_code == 65
    assert "expired" in result.stderr
    assert not marker.exists()


def test_a_receipt_with_a_duplicated_field_exits_65(tenant: Tenant, marker: Path) -> None:
    # The verifier keeps the last "actor", a reader that keeps the first sees another.
    genuine = decide(tenant, {**PERMIT_BODY, "idempotency_key": "dup-1"}).content
    doubled = b'{"actor": "mallory", ' + genuine[1:]
    result = gate_answered(tenant.env, doubled, tenant.keys, *MAIN, "--idempotency-key", "dup-1",
                           *record_run(marker))  # fmt: skip
    assert result.exit_code == 65
    assert "duplicate field 'actor'" in result.stderr
    assert not marker.exists()


def test_a_profile_b_deny_with_status_403_exits_77(tenant: Tenant, marker: Path) -> None:
    deny = decide(tenant, {**PERMIT_BODY, "context": {"branch": "feature/x"}, "request_id": "b-1"})
    result = gate_answered(tenant.env, deny.content, tenant.keys, *FEATURE_BRANCH,
                           "--idempotency-key", "b-1", *record_run(marker), status=403)  # fmt: skip
    assert result.exit_code == 77, result.output
    assert not marker.exists()


# --- usage errors: 2, before any decision is asked for --------------------------------


def test_no_command_is_a_usage_error(tenant: Tenant) -> None:
    result = gate(tenant.env, *MAIN)
    assert result.exit_code == 2
    assert "no command given" in result.stderr


def test_a_missing_api_key_is_a_usage_error(tenant: Tenant, marker: Path) -> None:
    result = gate({**tenant.env, "EXECAUTH_API_KEY": None}, *MAIN, *record_run(marker))
    assert result.exit_code == 2
    assert "EXECAUTH_API_KEY is not set" in result.stderr
    assert not marker.exists()


def test_a_missing_surface_is_a_usage_error(tenant: Tenant, marker: Path) -> None:
    assert gate(tenant.env, *record_run(marker)).exit_code == 2
    assert not marker.exists()


@pytest.mark.parametrize(
    "args",
    [
        ("--surface", "Not A Surface"),
        ("--surface", "deploy.production", "--context", "branch"),
        ("--surface", "deploy.production", "--context", "a=1", "--context", "a=2"),
        ("--surface", "deploy.production", "--keys", "/nonexistent/keys.json"),
        ("--surface", "deploy.production", "--receipt-file", "/nonexistent/dir/r.json"),
    ],
)
def test_bad_arguments_are_usage_errors(tenant: Tenant, marker: Path, args: tuple[str]) -> None:
    result = gate(tenant.env, *args, *record_run(marker))
    assert result.exit_code == 2, result.output
    assert not marker.exists()


def test_a_command_that_does_not_exist_is_a_usage_error(tenant: Tenant) -> None:
    result = gate(tenant.env, *MAIN, "--", "no-such-command-execauth-test")
    assert result.exit_code == 2
    assert "command not found" in result.stderr


# --- helpers: a stand-in service and a key this service never published ---------------


def gate_answered(
    env: Mapping[str, str | None], answer: bytes, keys: bytes, *args: str, status: int = 200
) -> Result:
    """``execauth gate ARGS`` against a stand-in that answers ``answer`` with ``status``."""
    with scripted(answer, keys, status=status) as url:
        return gate({**env, "EXECAUTH_URL": url}, *args)


@contextmanager
def scripted(answer: bytes, keys: bytes, *, status: int = 200) -> Iterator[str]:
    """A stand-in service: ``answer`` to every execute, ``keys`` as its key list."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._send(status, answer)

        def do_GET(self) -> None:
            self._send(200, keys)

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


SECRET = ServerSecret("gate-test-secret-" + "g" * 32)
ISSUER = "https://elsewhere.test"


def foreign_key_list() -> tuple[ActiveSigner, dict[str, Any]]:
    """A signing key of our own and its key list (not the service's)."""
    created = datetime.now(UTC) - timedelta(days=1)
    record = generate_signing_key(SECRET, created)
    return unseal_signer(SECRET, record), key_list_document([record], ISSUER)


def signed_permit(
    signer: ActiveSigner, idempotency_key: str, *, issued: datetime
) -> dict[str, Any]:
    """A PERMIT for ``PERMIT_BODY`` with a 10-minute ttl, issued at ``issued``."""
    request = parse_execute_request({**PERMIT_BODY, "idempotency_key": idempotency_key}, None)
    unsigned = build_receipt(
        receipt_id=new_receipt_id(issued),
        execution_id=new_execution_id(issued),
        request=request,
        decision=Decision(Outcome.PERMIT, "main-only", None, None, 600),
        policy=PolicyRef("deploys", 1, "sha256:" + "0" * 64),
        org_id="org_test",
        issuer=ISSUER,
        now=issued,
        key_id=signer.key_id,
    )
    return sign_receipt(unsigned, signer)[0]
