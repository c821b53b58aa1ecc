"""Start real ``execauth serve`` processes for end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
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


@dataclass(frozen=True)
class ServedOrg:
    """A first-start ``execauth serve`` with one org, its keys and a published policy."""

    url: str
    org_id: str
    execute_key: str
    admin_key: str  # an org ``admin`` API key
    admin_token: str  # the platform admin token the first start printed


@contextmanager
def served_org(
    workdir: Path, policy: str, *, admin_key_name: str = "ops-admin"
) -> Iterator[ServedOrg]:
    """Start the service on a fresh SQLite file in ``workdir``, as a new user does, and set up
    the org "Acme" with an ``execute`` key, an ``admin`` key and ``policy`` as ``deploys``."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = clean_env(
        EXECAUTH_DATABASE_URL=f"sqlite:///{workdir / 'execauth.db'}", EXECAUTH_ISSUER=url
    )
    with running_service(env, workdir, port):
        token = re.search(r"service_admin_[A-Za-z0-9_-]+", (workdir / "serve.log").read_text())
        assert token, "first start prints the admin token"
        admin = {"Authorization": f"Bearer {token.group(0)}"}
        org = httpx.post(url + "/console/v1/orgs", json={"name": "Acme"}, headers=admin)
        org_id = org.json()["org_id"]
        keys = url + f"/console/v1/orgs/{org_id}/keys"
        execute_key = httpx.post(keys, json={"name": "ci"}, headers=admin).json()["api_key"]
        named = {"name": admin_key_name, "role": "admin"}
        admin_key = httpx.post(keys, json=named, headers=admin).json()["api_key"]
        published = httpx.put(
            url + f"/console/v1/orgs/{org_id}/policies/deploys", content=policy, headers=admin
        )
        assert published.status_code == 201, published.text
        yield ServedOrg(url, org_id, execute_key, admin_key, token.group(0))
