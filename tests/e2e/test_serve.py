"""End to end: the real ``execauth serve`` process, the real CLI, a real SQLite file.

This is the README walkthrough, automated: first start prints an admin token,
an org, key and policy are created, decisions are verified offline, keys rotate.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.serving import clean_env, free_port, provision_org, run_cli, running_service

pytestmark = pytest.mark.e2e


@dataclass
class Server:
    url: str
    env: dict[str, str]
    admin_token: str
    workdir: Path

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(self.env, self.workdir, *args)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("serve")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = clean_env(
        EXECAUTH_DATABASE_URL=f"sqlite:///{workdir / 'execauth.db'}",
        EXECAUTH_ISSUER=url,
        EXECAUTH_URL=url,
    )
    with running_service(env, workdir, port):
        match = re.search(r"service_admin_[A-Za-z0-9_-]+", (workdir / "serve.log").read_text())
        assert match, "first start must print the generated admin token"
        yield Server(url, env, match.group(0), workdir)


@pytest.fixture(scope="module")
def api_key(server: Server) -> str:
    return new_org_key(server)


def new_org_key(server: Server) -> str:
    """A new organization with the deploy policy; its execute key's secret."""
    return provision_org(server.url, server.admin_token)[2]


def decide(server: Server, api_key: str, body: Mapping[str, object]) -> dict[str, object]:
    response = httpx.post(
        server.url + "/v1/execute", json=body, headers={"Authorization": f"Bearer {api_key}"}
    )
    assert response.status_code == 200, response.text
    receipt: dict[str, object] = response.json()
    return receipt


PERMIT: dict[str, object] = {
    "surface": "deploy.production",
    "actor": "release-bot",
    "context": {"branch": "main"},
}


def test_the_secret_key_file_is_created_private(server: Server) -> None:
    mode = (server.workdir / "execauth-secret.key").stat().st_mode & 0o777
    assert mode == 0o600


@pytest.mark.parametrize(
    ("body", "decision"),
    [
        (PERMIT, "PERMIT"),
        ({**PERMIT, "context": {"branch": "dev"}}, "DENY"),
        ({"surface": "deploy.production"}, "SILENCE"),
    ],
)
def test_each_decision_verifies_offline_with_a_saved_key_list(
    server: Server, api_key: str, body: dict[str, object], decision: str
) -> None:
    receipt = decide(server, api_key, body)
    assert receipt["decision"] == decision
    (server.workdir / "receipt.json").write_text(json.dumps(receipt))
    (server.workdir / "keys.json").write_text(
        httpx.get(server.url + "/.well-known/service-keys.json").text
    )
    result = server.cli("verify", "receipt.json", "--keys", "keys.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"VALID: {decision}" in result.stdout


def test_verify_fetches_keys_from_the_service_by_default(server: Server, api_key: str) -> None:
    (server.workdir / "r.json").write_text(json.dumps(decide(server, api_key, PERMIT)))
    result = server.cli("verify", "r.json")
    assert result.returncode == 0, result.stdout + result.stderr


def test_rotation_by_cli_reaches_the_running_server(server: Server, api_key: str) -> None:
    before = decide(server, api_key, PERMIT)
    rotated = server.cli("signing-keys", "rotate")
    assert rotated.returncode == 0, rotated.stderr
    new_key_id = rotated.stdout.split()[3]
    deadline = time.monotonic() + 10
    after = before
    while time.monotonic() < deadline and after["key_id"] != new_key_id:
        time.sleep(0.3)
        after = decide(server, api_key, PERMIT)
    assert after["key_id"] == new_key_id
    keys = httpx.get(server.url + "/.well-known/service-keys.json").text
    (server.workdir / "keys.json").write_text(keys)
    for receipt in (before, after):
        (server.workdir / "r.json").write_text(json.dumps(receipt))
        assert server.cli("verify", "r.json", "--keys", "keys.json").returncode == 0


def served_as_revoked(server: Server, key_id: object) -> bool:
    listed = httpx.get(server.url + "/.well-known/service-keys.json").json()["keys"]
    return any(k["key_id"] == key_id and k.get("status") == "revoked" for k in listed)


def test_revoked_key_receipts_stop_verifying(server: Server, api_key: str) -> None:
    receipt = decide(server, api_key, PERMIT)
    revoked = server.cli("signing-keys", "revoke", str(receipt["key_id"]))
    assert revoked.returncode == 0, revoked.stderr
    # The running server learns of it within its refresh interval (docs/operations.md);
    # `verify` reads the key list it serves, so wait for that, not for a fixed time.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not served_as_revoked(server, receipt["key_id"]):
        time.sleep(0.1)
    (server.workdir / "r.json").write_text(json.dumps(receipt))
    result = server.cli("verify", "r.json")
    assert result.returncode == 1
    assert "revoked_key" in result.stdout
    deadline = time.monotonic() + 10
    fresh = decide(server, api_key, PERMIT)
    while time.monotonic() < deadline and fresh["key_id"] == receipt["key_id"]:
        time.sleep(0.3)
        fresh = decide(server, api_key, PERMIT)
    (server.workdir / "r.json").write_text(json.dumps(fresh))
    assert server.cli("verify", "r.json").returncode == 0


def test_private_keys_are_not_stored_in_clear(server: Server) -> None:
    import sqlite3

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    conn = sqlite3.connect(server.workdir / "execauth.db")
    rows = conn.execute("SELECT public_key, sealed_private_key FROM signing_keys").fetchall()
    conn.close()
    for public, sealed in rows:
        assert len(sealed) == 12 + 32 + 16  # nonce, ciphertext, GCM tag
        for offset in range(len(sealed) - 31):
            candidate = Ed25519PrivateKey.from_private_bytes(sealed[offset : offset + 32])
            assert candidate.public_key().public_bytes_raw() != public


def org_of(server: Server, api_key: str) -> str:
    return str(decide(server, api_key, PERMIT)["org_id"])


def test_a_receipt_is_sequenced_into_its_log_within_seconds(server: Server, api_key: str) -> None:
    receipt = decide(server, api_key, PERMIT)
    auth = {"Authorization": f"Bearer {api_key}"}
    started = time.monotonic()
    while True:
        proof = httpx.get(f"{server.url}/v1/receipts/{receipt['receipt_id']}/proof", headers=auth)
        if proof.status_code == 200:
            break
        assert proof.status_code == 202
        assert time.monotonic() - started < 5, "not sequenced within 5 seconds"
        time.sleep(0.1)
    assert proof.json()["tree_size"] > proof.json()["log_index"]


def test_an_exported_bundle_verifies_offline_and_against_a_trusted_checkpoint(
    server: Server,
) -> None:
    # Its own org: other tests revoke signing keys, which rightly fails their receipts.
    api_key = new_org_key(server)
    org_id = org_of(server, api_key)
    auth = {"Authorization": f"Bearer {api_key}"}
    test_a_receipt_is_sequenced_into_its_log_within_seconds(server, api_key)
    trusted = httpx.get(f"{server.url}/operator/log/checkpoint", headers=auth)
    (server.workdir / "trusted.json").write_text(trusted.text)
    test_a_receipt_is_sequenced_into_its_log_within_seconds(server, api_key)
    env_with_token = {**server.env, "EXECAUTH_ADMIN_TOKEN": server.admin_token}
    exported = run_cli(
        env_with_token, server.workdir, "export", "--org", org_id, "-o", "bundle.json"
    )
    assert exported.returncode == 0, exported.stderr
    audited = server.cli("audit", "verify", "bundle.json", "--trusted-checkpoint", "trusted.json")
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert "consistent with the trusted checkpoint" in audited.stdout
