"""The ledger issue, item 6: ``kill -9`` of a loaded server loses no acknowledged receipt.

A real ``execauth serve`` takes executes from concurrent clients and is killed with
SIGKILL mid-load, then restarted on the same database: as one process, and as
``--workers 2`` (two gateway workers and the writer process, all killed at once).
Every receipt a client got a 200 for must be stored, sequenced into its org's log
within seconds, and provable: its inclusion proof is checked here with the RFC 9162
algorithms written out in ``tests.store.test_ledger``, against a root that the
audited log also has. The whole log, exported after the restart, must pass
``execauth audit verify`` against a checkpoint published before the crash.

The figures (acknowledged, found after restart, lost, sequenced, verified) are
printed — run with ``-s`` to see them — and carried in the assertion messages.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.conftest import POSTGRES_URL, fresh_postgres_database
from tests.serving import (
    clean_env,
    free_port,
    provision_org,
    run_cli,
    running_service,
    spawn_service,
)
from tests.store.test_ledger import leaf, mth, note_parts, root_from_inclusion

pytestmark = pytest.mark.e2e

CLIENTS = 24
ACKNOWLEDGED_BEFORE_KILL = 600  # kill once this many receipts were answered …
LOAD_LIMIT_SECONDS = 10.0  # … or after this long, whichever comes first
SEQUENCING_LIMIT_SECONDS = 15.0  # after the restart, for every receipt to be provable
ADMIN_TOKEN = "service_admin_" + secrets.token_urlsafe(32)
PLANS = {
    "free": {"executes_per_month": 1000, "requests_per_minute": 5000},
    "load": {"unmetered": True, "requests_per_minute": 1_000_000},  # neither 429 nor quota
}
BODIES: list[dict[str, object]] = [
    {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}},
    {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "dev"}},
    {"surface": "deploy.production", "actor": "release-bot"},  # SILENCE: missing context
]


@pytest.fixture(scope="module", params=[1, 2], ids=["one-process", "two-workers"])
def workers(request: pytest.FixtureRequest) -> int:
    count: int = request.param
    return count


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def database_url(
    request: pytest.FixtureRequest, workers: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A new database for each crash: a SQLite file, or a whole PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('crash-sqlite') / 'execauth.db'}"
        return
    if not POSTGRES_URL:
        pytest.skip("the PostgreSQL crash test needs EXECAUTH_TEST_POSTGRES_URL (set by .ci/run)")
    with fresh_postgres_database("execauth_crash_") as url:
        yield url


@dataclass
class Load:
    """What the clients saw: the receipts they were given, and every other outcome."""

    acknowledged: list[dict[str, Any]] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    trusted_checkpoint: str | None = None  # published before the kill


async def load_until_killed(url: str, secret: str, pid: int) -> Load:
    """``CLIENTS`` clients execute back to back until the server is SIGKILLed under them."""
    load = Load()
    killed = asyncio.Event()
    auth = {"Authorization": f"Bearer {secret}"}
    limits = httpx.Limits(max_connections=CLIENTS + 1)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:

        async def one_client(offset: int) -> None:
            sent = 0
            while not killed.is_set():
                body = BODIES[(offset + sent) % len(BODIES)]
                sent += 1
                try:
                    response = await client.post("/v1/execute", json=body, headers=auth)
                except httpx.TransportError as exc:
                    load.outcomes[type(exc).__name__] += 1
                    continue
                load.outcomes[str(response.status_code)] += 1
                if response.status_code == 200:
                    # A response that arrives whole after the kill still counts: the
                    # server wrote it, so it had committed the receipt.
                    load.acknowledged.append(response.json())

        async def kill_mid_load() -> None:
            # An auditor keeps fetching the latest checkpoint; the last one before the
            # kill is what the log after the restart must still extend.
            deadline = time.monotonic() + LOAD_LIMIT_SECONDS
            while time.monotonic() < deadline and (
                load.trusted_checkpoint is None or len(load.acknowledged) < ACKNOWLEDGED_BEFORE_KILL
            ):
                await asyncio.sleep(0.05)
                published = await client.get("/operator/log/checkpoint", headers=auth)
                if published.status_code == 200:
                    load.trusted_checkpoint = published.json()["checkpoint"]
            os.killpg(pid, signal.SIGKILL)  # the server, its workers and its writer process
            killed.set()

        await asyncio.gather(kill_mid_load(), *(one_client(i) for i in range(CLIENTS)))
    return load


@dataclass
class AfterRestart:
    proofs: dict[str, dict[str, Any]]  # receipt_id -> its inclusion proof (sequenced)
    missing: list[str]  # 404: the service does not have the receipt
    pending: list[str]  # still 202 when the time was up


async def proofs_after_restart(url: str, secret: str, receipt_ids: list[str]) -> AfterRestart:
    """Ask for every receipt's proof until all are sequenced, or missing, or time is up."""
    auth = {"Authorization": f"Bearer {secret}"}
    result = AfterRestart({}, [], [])
    waiting = set(receipt_ids)
    deadline = time.monotonic() + SEQUENCING_LIMIT_SECONDS
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        gate = asyncio.Semaphore(16)

        async def proof(receipt_id: str) -> tuple[str, httpx.Response]:
            async with gate:
                return receipt_id, await client.get(
                    f"/v1/receipts/{receipt_id}/proof", headers=auth
                )

        while waiting and time.monotonic() < deadline:
            for receipt_id, response in await asyncio.gather(*map(proof, sorted(waiting))):
                if response.status_code == 200:
                    result.proofs[receipt_id] = response.json()
                elif response.status_code == 404:
                    result.missing.append(receipt_id)
                else:
                    assert response.status_code == 202, response.text
                    continue
                waiting.discard(receipt_id)
            if waiting:
                await asyncio.sleep(0.25)
    result.pending = sorted(waiting)
    return result


def verified_proofs(
    receipts: dict[str, dict[str, Any]], proofs: dict[str, dict[str, Any]], log: list[bytes]
) -> int:
    """How many proofs hold: the client's receipt is the proof's leaf, the path leads to
    the checkpoint's root, and the audited log (``log``, every leaf hash) has that root
    at that size."""
    roots: dict[int, bytes] = {}  # tree size -> root of the audited log at that size
    holding = 0
    for receipt_id, proof in proofs.items():
        _, size, root, _ = note_parts(proof["checkpoint"])
        digest = leaf(receipts[receipt_id])
        path = [bytes.fromhex(h) for h in proof["inclusion_path"]]
        if size not in roots and size <= len(log):
            roots[size] = mth(log[:size])
        holding += (
            bytes.fromhex(proof["leaf_hash"]) == digest
            and size == proof["tree_size"]
            and root_from_inclusion(proof["log_index"], size, digest, path) == root
            and roots.get(size) == root
        )
    return holding


@dataclass
class Crash:
    """One crash and restart, and everything observed about it."""

    backend: str
    load: Load
    acknowledged: dict[str, dict[str, Any]]  # receipt_id -> the receipt a client was given
    after: AfterRestart
    bundle: dict[str, Any]  # ``execauth export`` after the restart
    audit: subprocess.CompletedProcess[str]  # ``execauth audit verify`` of that bundle
    verified: int  # inclusion proofs that hold (``verified_proofs``)

    @property
    def figures(self) -> str:
        acknowledged, lost = len(self.acknowledged), len(self.after.missing)
        trusted = note_parts(self.load.trusted_checkpoint)[1] if self.load.trusted_checkpoint else 0
        return (
            f"crash test on {self.backend}: acknowledged {acknowledged}, found after restart "
            f"{acknowledged - lost}, lost {lost}, sequenced {len(self.after.proofs)}, "
            f"inclusion proofs verified {self.verified}; log size {self.bundle['tree_size']} "
            f"(trusted checkpoint from before the kill: {trusted}); "
            f"client outcomes {dict(self.load.outcomes)}"
        )


@pytest.fixture(scope="module")
def crash(database_url: str, workers: int, tmp_path_factory: pytest.TempPathFactory) -> Crash:
    """Load a real server, SIGKILL it mid-load, restart it on the same database, collect."""
    workdir = tmp_path_factory.mktemp("crash")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = clean_env(
        EXECAUTH_DATABASE_URL=database_url,
        EXECAUTH_SECRET_KEY=secrets.token_urlsafe(32),
        EXECAUTH_ADMIN_TOKEN=ADMIN_TOKEN,
        EXECAUTH_ISSUER=url,
        EXECAUTH_URL=url,
        EXECAUTH_PLANS=json.dumps(PLANS),
    )
    server = spawn_service(env, workdir, port, log_name="killed.log", workers=workers)
    try:
        org_id, _, secret = provision_org(url, ADMIN_TOKEN, plan="load")
        load = asyncio.run(load_until_killed(url, secret, server.pid))
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(timeout=20)
    assert server.returncode == -signal.SIGKILL
    in_flight = sum(n for outcome, n in load.outcomes.items() if not outcome.isdigit())
    assert in_flight > 0, f"the kill hit no request in flight: {load.outcomes}"
    assert load.trusted_checkpoint is not None, "no checkpoint was published before the kill"
    (workdir / "before-kill.checkpoint").write_text(load.trusted_checkpoint)

    acknowledged = {receipt["receipt_id"]: receipt for receipt in load.acknowledged}
    with running_service(env, workdir, port, log_name="restarted.log", workers=workers):
        after = asyncio.run(proofs_after_restart(url, secret, sorted(acknowledged)))
        exported = run_cli(env, workdir, "export", "--org", org_id, "-o", "bundle.json")
    assert exported.returncode == 0, exported.stderr
    audit = run_cli(
        env, workdir, "audit", "verify", "bundle.json",
        "--trusted-checkpoint", "before-kill.checkpoint",
    )  # fmt: skip
    bundle = json.loads((workdir / "bundle.json").read_text())
    log = [bytes.fromhex(h) for h in bundle["leaf_hashes"]]
    result = Crash(
        backend=("SQLite" if database_url.startswith("sqlite") else "PostgreSQL")
        + (f", {workers} workers and the writer process" if workers > 1 else ", one process"),
        load=load,
        acknowledged=acknowledged,
        after=after,
        bundle=bundle,
        audit=audit,
        verified=verified_proofs(acknowledged, after.proofs, log),
    )
    print("\n" + result.figures)
    return result


def test_every_acknowledged_receipt_is_stored_after_kill_9(crash: Crash) -> None:
    assert crash.acknowledged, crash.figures
    assert crash.after.missing == [], crash.figures


def test_every_acknowledged_receipt_is_sequenced_within_seconds_of_the_restart(
    crash: Crash,
) -> None:
    assert crash.after.pending == [], crash.figures
    assert len(crash.after.proofs) == len(crash.acknowledged), crash.figures


def test_every_acknowledged_receipts_inclusion_proof_verifies(crash: Crash) -> None:
    assert crash.verified == len(crash.acknowledged), crash.figures


def test_the_log_after_the_restart_extends_the_checkpoint_published_before_the_kill(
    crash: Crash,
) -> None:
    in_bundle = {entry["receipt"]["receipt_id"] for entry in crash.bundle["receipts"]}
    assert set(crash.acknowledged) <= in_bundle, crash.figures
    assert crash.audit.returncode == 0, crash.audit.stdout + crash.audit.stderr
    assert "consistent with the trusted checkpoint" in crash.audit.stdout
