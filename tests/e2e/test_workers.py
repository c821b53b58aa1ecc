"""``execauth serve --workers 2``: gateway workers and one writer process, as deployed.

Real processes on a real SQLite file: the workers share the listening socket and
hand every receipt to the writer process. The contract is the single process's:
every receipt verifies, the monthly quota is exact across workers, metrics count
every worker, and a writer process that dies means 503 (never a receipt that is
not stored) until the parent has restarted it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import signal
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from execauth.verify import parse_key_list, verify_receipt
from tests.serving import clean_env, free_port, provision_org, spawn_service

pytestmark = pytest.mark.e2e

ADMIN_TOKEN = "service_admin_" + secrets.token_urlsafe(32)
PLANS = {
    "free": {"executes_per_month": 60, "requests_per_minute": 100_000},
    "load": {"unmetered": True, "requests_per_minute": 1_000_000},
}
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


@dataclass
class Service:
    url: str
    database: Path
    log: Path
    process: Any

    def stored(self, org_id: str) -> int:
        with sqlite3.connect(self.database) as conn:
            (count,) = conn.execute(
                "SELECT count(*) FROM executions WHERE org_id = ?", (org_id,)
            ).fetchone()
        return int(count)

    def writer_pid(self, after: int = 0) -> int:
        """The writer process's pid, from its log line (the ``after``-th restart on)."""
        pids = re.findall(r"receipt writer process (\d+) serving", self.log.read_text())
        assert len(pids) > after, self.log.read_text()
        return int(pids[after])

    def log_keeper_pid(self) -> int:
        """The running log keeper's pid, from its log line: the newest whose process is
        alive (after a writer restart, the new one may not have started yet)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pids = re.findall(r"log keeper process (\d+) placing", self.log.read_text())
            for pid in reversed(pids):
                with contextlib.suppress(OSError):
                    if b"log keeper" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        return int(pid)
            time.sleep(0.1)
        raise AssertionError(f"no log keeper process running: {self.log.read_text()}")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    workdir = tmp_path_factory.mktemp("workers")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    database = workdir / "execauth.db"
    env = clean_env(
        EXECAUTH_DATABASE_URL=f"sqlite:///{database}",
        EXECAUTH_SECRET_KEY=secrets.token_urlsafe(32),
        EXECAUTH_ADMIN_TOKEN=ADMIN_TOKEN,
        EXECAUTH_ISSUER=url,
        EXECAUTH_PLANS=json.dumps(PLANS),
    )
    process = spawn_service(env, workdir, port, workers=2)
    try:
        yield Service(url, database, workdir / "serve.log", process)
    finally:
        process.terminate()
        process.wait(timeout=60)


async def execute_many(
    url: str, secret: str, count: int, *, connections: int = 16, keys: list[str] | None = None
) -> list[httpx.Response]:
    """``count`` executes over ``connections`` connections (so that both workers take
    some), under the idempotency ``keys`` if given (one each)."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    auth = {"Authorization": f"Bearer {secret}"}
    keyed = [auth | {"Idempotency-Key": k} for k in keys] if keys is not None else [auth] * count
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
        return await asyncio.gather(
            *(client.post("/v1/execute", json=PERMIT, headers=h) for h in keyed[:count])
        )


def test_every_receipt_from_either_worker_verifies_with_the_published_keys(
    service: Service,
) -> None:
    _, _, secret = provision_org(service.url, ADMIN_TOKEN, plan="load")
    answers = asyncio.run(execute_many(service.url, secret, 40))
    assert {a.status_code for a in answers} == {200}
    keys, issuer = parse_key_list(httpx.get(service.url + "/.well-known/service-keys.json").json())
    now = datetime.now(UTC)
    for answer in answers:
        verdict = verify_receipt(answer.json(), keys, now=now, issuer=issuer)
        assert verdict.authentic, verdict
        assert verdict.decision == "PERMIT"


def test_the_monthly_quota_is_exact_across_workers(service: Service) -> None:
    org_id, _, secret = provision_org(service.url, ADMIN_TOKEN, plan="free")
    answers = asyncio.run(execute_many(service.url, secret, 90))
    statuses = Counter(a.status_code for a in answers)
    assert statuses == {200: 60, 429: 30}
    assert service.stored(org_id) == 60


def test_past_the_quota_either_worker_answers_a_repeat_with_its_receipt(
    service: Service,
) -> None:
    org_id, _, secret = provision_org(service.url, ADMIN_TOKEN, plan="free")
    decided = [f"deploy-{n}" for n in range(60)]
    first = asyncio.run(execute_many(service.url, secret, 60, keys=decided))
    refused = [f"late-{n}" for n in range(20)]
    late = asyncio.run(execute_many(service.url, secret, 20, keys=refused))

    again = asyncio.run(execute_many(service.url, secret, 60, keys=decided))

    assert [a.status_code for a in first] == [200] * 60
    assert [a.status_code for a in late] == [429] * 20
    assert [a.status_code for a in again] == [200] * 60
    assert [a.content for a in again] == [a.content for a in first]
    assert {a.headers.get("idempotent-replayed") for a in again} == {"true"}
    assert service.stored(org_id) == 60


def test_metrics_count_the_answers_of_every_worker(service: Service) -> None:
    def answered_200() -> float:
        text = httpx.get(service.url + "/metrics").text
        match = re.search(r'^execauth_execute_responses_total\{status="200"\} (\S+)$', text, re.M)
        return float(match.group(1)) if match else 0.0

    _, _, secret = provision_org(service.url, ADMIN_TOKEN, plan="load")
    before = answered_200()
    asyncio.run(execute_many(service.url, secret, 30))
    # Whichever worker answers /metrics reports the sum over both.
    assert {answered_200() - before for _ in range(6)} == {30.0}


def test_a_killed_writer_process_means_503_until_it_is_restarted(service: Service) -> None:
    org_id, _, secret = provision_org(service.url, ADMIN_TOKEN, plan="load")
    restarts_before = len(re.findall(r"serving on", service.log.read_text()))
    os.kill(service.writer_pid(after=restarts_before - 1), signal.SIGKILL)
    outcomes: Counter[int] = Counter()
    acknowledged = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        answers = asyncio.run(execute_many(service.url, secret, 8, connections=8))
        outcomes.update(a.status_code for a in answers)
        acknowledged += sum(a.status_code == 200 for a in answers)
        if outcomes[503] and answers[-1].status_code == 200:
            break
        time.sleep(0.1)
    assert set(outcomes) <= {200, 503}, outcomes
    assert outcomes[503] > 0, f"the writer's death went unnoticed: {outcomes}"
    assert answers[-1].status_code == 200, f"the writer was not restarted: {outcomes}"
    assert service.stored(org_id) == acknowledged
    assert "restarting it" in service.log.read_text()


def test_a_killed_log_keeper_process_is_restarted_and_every_receipt_reaches_its_log(
    service: Service,
) -> None:
    _, _, secret = provision_org(service.url, ADMIN_TOKEN, plan="load")
    auth = {"Authorization": f"Bearer {secret}"}
    first = asyncio.run(execute_many(service.url, secret, 10))
    os.kill(service.log_keeper_pid(), signal.SIGKILL)
    second = asyncio.run(execute_many(service.url, secret, 10))
    answers = first + second
    assert {a.status_code for a in answers} == {200}  # the receipt path never waits for it
    deadline = time.monotonic() + 30  # a guard against a hang, not a measurement
    for answer in answers:
        proof = f"{service.url}/v1/receipts/{answer.json()['receipt_id']}/proof"
        while httpx.get(proof, headers=auth).status_code != 200:
            assert time.monotonic() < deadline, "not in its log within 30 s"
            time.sleep(0.1)
    assert "the log keeper process exited with code -9; restarting it" in service.log.read_text()


def test_sigterm_stops_the_workers_and_the_writer_process(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    workdir = tmp_path_factory.mktemp("workers-stop")
    port = free_port()
    env = clean_env(
        EXECAUTH_DATABASE_URL=f"sqlite:///{workdir / 'execauth.db'}",
        EXECAUTH_SECRET_KEY=secrets.token_urlsafe(32),
        EXECAUTH_ADMIN_TOKEN=ADMIN_TOKEN,
    )
    process = spawn_service(env, workdir, port, workers=2)
    process.terminate()
    assert process.wait(timeout=60) == 0
    deadline = time.monotonic() + 20
    while _group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _group_alive(process.pid), "a worker or the writer process outlived serve"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_revoked_key_is_refused_by_every_worker_as_soon_as_revocation_answers(
    service: Service,
) -> None:
    org_id, key_id, secret = provision_org(service.url, ADMIN_TOKEN, plan="load")
    warm = asyncio.run(execute_many(service.url, secret, 40))  # both workers cache the key
    assert {a.status_code for a in warm} == {200}
    revoked = httpx.delete(
        f"{service.url}/console/v1/orgs/{org_id}/keys/{key_id}",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )
    assert revoked.status_code == 204
    # Well within the caches' 1 s ttl: only the shared change counter can refuse these.
    after = asyncio.run(execute_many(service.url, secret, 40))
    assert Counter(a.status_code for a in after) == {401: 40}
