"""Start real ``execauth serve`` processes for end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.conftest import DEPLOY_POLICY

EXECAUTH = str(Path(sys.executable).parent / "execauth")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def clean_env(**settings: str) -> dict[str, str]:
    """This process's environment without any EXECAUTH_* leaking in, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXECAUTH_")}
    return env | settings


def ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def spawn_service(
    env: Mapping[str, str],
    workdir: Path,
    port: int,
    *,
    log_name: str = "serve.log",
    workers: int = 1,
) -> subprocess.Popen[bytes]:
    """Start ``execauth serve --port PORT``; return the process once ``/readyz`` answers 200.

    Stopping it is the caller's job (``running_service`` terminates it; a crash test kills
    its process group: with ``workers`` > 1 that holds the workers and the writer process).
    """
    url = f"http://127.0.0.1:{port}"
    log_path = workdir / log_name
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [EXECAUTH, "serve", "--port", str(port), "--workers", str(workers)], env=dict(env),
            cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    # Generous: a loaded 2-core machine takes tens of seconds to start N worker processes.
    deadline = time.monotonic() + 90
    while not ready(url):
        if time.monotonic() > deadline or process.poll() is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=20)
            pytest.fail("execauth serve did not become ready:\n" + log_path.read_text())
        time.sleep(0.2)
    return process


@contextmanager
def running_service(
    env: Mapping[str, str],
    workdir: Path,
    port: int,
    *,
    log_name: str = "serve.log",
    workers: int = 1,
) -> Iterator[str]:
    """``execauth serve --port PORT`` until the block ends; yields its URL once ready."""
    process = spawn_service(env, workdir, port, log_name=log_name, workers=workers)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=40)


def run_cli(env: Mapping[str, str], workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``execauth ARGS…`` in ``workdir``; its exit code and output, never raising on failure."""
    return subprocess.run(
        [EXECAUTH, *args], env=dict(env), cwd=workdir, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip


def provision_org(url: str, admin_token: str, *, plan: str = "free") -> tuple[str, str, str]:
    """(org_id, key_id, secret): a new org on ``plan`` with the deploy policy and an execute key.

    Made through the console API, as an administrator would.
    """
    admin = {"Authorization": f"Bearer {admin_token}"}
    org = httpx.post(f"{url}/console/v1/orgs", json={"name": "Acme", "plan": plan}, headers=admin)
    assert org.status_code == 201, org.text
    org_id = org.json()["org_id"]
    key = httpx.post(f"{url}/console/v1/orgs/{org_id}/keys", json={"name": "ci"}, headers=admin)
    assert key.status_code == 201, key.text
    published = httpx.put(
        f"{url}/console/v1/orgs/{org_id}/policies/deploys", content=DEPLOY_POLICY, headers=admin
    )
    assert published.status_code == 201, published.text
    return org_id, key.json()["key_id"], key.json()["api_key"]
