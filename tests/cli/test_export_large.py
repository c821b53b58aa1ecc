"""``execauth export`` of 50,000 receipts against a real ``execauth serve``: the bundle is
streamed by the service and by the client, neither holds it in memory, and
``execauth audit verify`` accepts it (the first-hour issue: exports failed at about
13,000 receipts after a fixed 30 s)."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from execauth.api.app import create_app
from execauth.config import Settings
from execauth.request import parse_execute_request
from execauth.serving.runtime import bootstrap
from tests.conftest import DEPLOY_POLICY
from tests.serving import clean_env, free_port, spawn_service

pytestmark = pytest.mark.e2e

RECEIPTS = 50_000
ADMIN_TOKEN = "service_admin_" + secrets.token_urlsafe(32)
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
# The CLI in a fresh interpreter that reports its own peak memory when it ends.
MEASURED_CLI = """
import json, sys
from execauth.cli import app
try:
    app(sys.argv[1:])
except SystemExit as exit:
    status = exit.code
# VmHWM, not getrusage's ru_maxrss: Linux carries the latter over an exec from the parent.
status_text = open("/proc/self/status").read()
peak = int(status_text.split("VmHWM:")[1].split()[0]) * 1024
print(json.dumps({"status": status, "peak_rss": peak}), file=sys.stderr)
"""


@dataclass(frozen=True)
class Exported:
    bundle: Path
    seconds: float
    client_peak_rss: int
    client_baseline_rss: int  # the same CLI's peak for `export --help`: its imports
    server_peak_rss_growth: int
    stdout: str
    env: dict[str, str]


def peak_rss(pid: int) -> int:
    """The process's high-water mark of resident memory (Linux ``VmHWM``), in bytes."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status)[1]) * 1024  # type: ignore[index]


async def seed(settings: Settings, count: int) -> str:
    """``count`` PERMITs for a new unmetered org, decided and sequenced in this process.

    The execute path without HTTP (``ExecutionService.execute``, the writer, the
    sequencer): 50,000 requests through an HTTP client would take most of the time.
    """
    runtime = bootstrap(settings)
    app = create_app(runtime)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=settings.issuer) as client:
            admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            org_id = (
                await client.post("/console/v1/orgs", json={"name": "Big"}, headers=admin)
            ).json()["org_id"]
            secret = (
                await client.post(
                    f"/console/v1/orgs/{org_id}/keys", json={"name": "ci"}, headers=admin
                )
            ).json()["api_key"]
            published = await client.put(
                f"/console/v1/orgs/{org_id}/policies/deploys", content=DEPLOY_POLICY, headers=admin
            )
            assert published.status_code == 201, published.text
        service = app.state.service
        principal = await service.authenticate(f"Bearer {secret}")
        request = parse_execute_request(PERMIT, None)
        for start in range(0, count, 512):
            batch = min(512, count - start)
            await asyncio.gather(*(service.execute(principal, request) for _ in range(batch)))
        while app.state.sequencer.run_once():
            pass  # the writer's thread may sequence some of them meanwhile
        checkpoint = runtime.logs.latest_checkpoint(org_id)
        assert checkpoint is not None
        assert checkpoint.tree_size == count
    return str(org_id)


def run_measured(env: dict[str, str], cwd: Path, *args: str) -> tuple[int, int, str, float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", MEASURED_CLI, *args], env=env, cwd=cwd, capture_output=True,
        text=True, timeout=600, check=False,
    )  # fmt: skip
    seconds = time.monotonic() - started
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["status"], report["peak_rss"], done.stdout, seconds


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exported]:
    workdir = tmp_path_factory.mktemp("export")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    database = f"sqlite:///{workdir / 'execauth.db'}"
    secret_key = "export-test-secret-" + secrets.token_urlsafe(32)
    settings = Settings(
        database_url=database, secret_key=secret_key, admin_token=ADMIN_TOKEN, issuer=url,
        secret_key_file=workdir / "unused.key", sequencer_interval_seconds=3600,
    )  # fmt: skip
    org_id = asyncio.run(seed(settings, RECEIPTS))
    env = clean_env(
        EXECAUTH_DATABASE_URL=database,
        EXECAUTH_SECRET_KEY=secret_key,
        EXECAUTH_ADMIN_TOKEN=ADMIN_TOKEN,
        EXECAUTH_URL=url,
    )
    process = spawn_service(env, workdir, port)
    try:
        before = peak_rss(process.pid)
        status, client_peak, stdout, seconds = run_measured(
            env, workdir, "export", "--org", org_id, "-o", "bundle.json", "--timeout", "30"
        )
        assert status == 0, stdout
        growth = peak_rss(process.pid) - before
        _, baseline, _, _ = run_measured(env, workdir, "export", "--help")
        yield Exported(workdir / "bundle.json", seconds, client_peak, baseline, growth, stdout, env)
    finally:
        process.terminate()
        process.wait(timeout=40)


def test_export_of_50000_receipts_reports_them_all(exported: Exported) -> None:
    assert f": {RECEIPTS} receipts, log size {RECEIPTS}" in exported.stdout
    print(  # the numbers for docs/performance.md; shown with pytest -s
        f"\nexport: {RECEIPTS} receipts, {exported.bundle.stat().st_size} bytes, "
        f"{exported.seconds:.1f} s, client peak RSS {exported.client_peak_rss >> 20} MiB "
        f"(imports alone {exported.client_baseline_rss >> 20} MiB), "
        f"server peak RSS growth {exported.server_peak_rss_growth >> 20} MiB"
    )


def test_export_of_50000_receipts_passes_audit_verify(exported: Exported) -> None:
    status, _, stdout, _ = run_measured(
        exported.env, exported.bundle.parent, "audit", "verify", "bundle.json", "--json"
    )
    assert status == 0, stdout[-2000:]
    report = json.loads(stdout)
    assert report["status"] == "VALID"
    assert report["receipts_checked"] == RECEIPTS


def test_the_bundle_is_larger_than_the_memory_bounds_below(exported: Exported) -> None:
    assert exported.bundle.stat().st_size > 96 << 20


def test_the_client_does_not_hold_the_bundle_in_memory(exported: Exported) -> None:
    # Bounded by what one read of the socket brings, whatever the bundle's size.
    assert exported.client_peak_rss - exported.client_baseline_rss < 32 << 20


def test_the_service_does_not_hold_the_bundle_in_memory(exported: Exported) -> None:
    # Bounded by one chunk of the log (``export.RECEIPTS_PER_CHUNK``) and the database's
    # page caches, whatever the bundle's size.
    assert exported.server_peak_rss_growth < 64 << 20
