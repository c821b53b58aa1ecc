"""Backup and restore (the ledger issue, item 7): a rolled-back log is detected.

A real ``execauth serve`` on SQLite is backed up online (``execauth db backup``: the
database file and its Merkle log file) and keeps answering; an auditor saves a
checkpoint; the backup is restored as docs/operations.md says. The restarted service
cannot tell — its checkpoints were restored too — and signs the shorter log under the
same origin. The auditor's saved checkpoint catches it: the log is
behind it, and once it has grown again, inconsistent with it.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.serving import clean_env, free_port, provision_org, run_cli, running_service

pytestmark = pytest.mark.e2e

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
ADMIN_TOKEN = "service_admin_" + secrets.token_urlsafe(32)


@dataclass
class Restore:
    lost_receipt_proof: httpx.Response  # a receipt issued after the backup, asked after
    audit_of_restored_log: subprocess.CompletedProcess[str]
    audit_of_grown_log: subprocess.CompletedProcess[str]


def issue(url: str, auth: dict[str, str], count: int) -> list[str]:
    """``count`` PERMITs; their receipt ids, once the log holds them all."""
    made = [httpx.post(url + "/v1/execute", json=PERMIT, headers=auth) for _ in range(count)]
    assert {r.status_code for r in made} == {200}
    receipt_ids = [r.json()["receipt_id"] for r in made]
    deadline = time.monotonic() + 10
    for receipt_id in receipt_ids:
        while httpx.get(f"{url}/v1/receipts/{receipt_id}/proof", headers=auth).status_code != 200:
            assert time.monotonic() < deadline, "not sequenced within 10 s"
            time.sleep(0.1)
    return receipt_ids


def audit(env: dict[str, str], workdir: Path, org_id: str) -> subprocess.CompletedProcess[str]:
    """Export the org's log from the running service and audit it against saved.json."""
    exported = run_cli(env, workdir, "export", "--org", org_id, "-o", "bundle.json")
    assert exported.returncode == 0, exported.stderr
    return run_cli(
        env, workdir, "audit", "verify", "bundle.json", "--trusted-checkpoint", "saved.json"
    )


@pytest.fixture(scope="module")
def restore(tmp_path_factory: pytest.TempPathFactory) -> Restore:
    workdir = tmp_path_factory.mktemp("restore")
    database, backup = workdir / "execauth.db", workdir / "backup"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = clean_env(
        EXECAUTH_DATABASE_URL=f"sqlite:///{database}",
        EXECAUTH_SECRET_KEY=secrets.token_urlsafe(32),
        EXECAUTH_ADMIN_TOKEN=ADMIN_TOKEN,
        EXECAUTH_ISSUER=url,
        EXECAUTH_URL=url,
    )
    with running_service(env, workdir, port, log_name="before.log"):
        org_id, _, secret = provision_org(url, ADMIN_TOKEN)
        auth = {"Authorization": f"Bearer {secret}"}
        issue(url, auth, 3)
        backed_up = run_cli(env, workdir, "db", "backup", str(backup))  # online
        assert backed_up.returncode == 0, backed_up.stderr
        (lost,) = issue(url, auth, 1)
        issue(url, auth, 3)
        saved = httpx.get(f"{url}/operator/log/checkpoint", headers=auth)
        assert saved.json()["tree_size"] == 7
        (workdir / "saved.json").write_text(saved.text)
    # As docs/operations.md says: both files and their -wal and -shm away, the copies in.
    for name in ("execauth.db", "execauth.merkle.db"):
        for stale in (name, f"{name}-wal", f"{name}-shm"):
            (workdir / stale).unlink(missing_ok=True)
        (backup / name).rename(workdir / name)
    with running_service(env, workdir, port, log_name="after.log"):
        lost_proof = httpx.get(f"{url}/v1/receipts/{lost}/proof", headers=auth)
        restored = audit(env, workdir, org_id)
        issue(url, auth, 6)  # the restored log, size 3, grows past the saved size 7
        grown = audit(env, workdir, org_id)
    return Restore(lost_proof, restored, grown)


def test_a_receipt_issued_after_the_backup_has_no_proof_after_the_restore(
    restore: Restore,
) -> None:
    assert restore.lost_receipt_proof.status_code == 404


def test_a_restored_log_is_behind_the_checkpoint_an_auditor_saved(restore: Restore) -> None:
    assert restore.audit_of_restored_log.returncode == 1
    assert "ROLLED BACK" in restore.audit_of_restored_log.stdout


def test_a_restored_log_that_grew_again_is_inconsistent_with_the_saved_checkpoint(
    restore: Restore,
) -> None:
    assert restore.audit_of_grown_log.returncode == 1
    assert "INCONSISTENT" in restore.audit_of_grown_log.stdout
