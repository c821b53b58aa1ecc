"""The scale-out topology of docs/deploy.md, for real: HAProxy in front of three instances.

HAProxy (Debian's package, running ``deploy/haproxy/haproxy.cfg`` as shipped) terminates
TLS in front of three ``execauth serve`` processes that share one PostgreSQL database and
Redis. The schema is migrated once by ``execauth db upgrade`` and the instances start with
``EXECAUTH_MIGRATE_ON_START=false``: the commands the container image runs.

Clients send executes through the proxy, each with its own idempotency key, and retry a
transport error or a 502/503/504 with the same key and body. Under that load:

1. one instance is killed with SIGKILL, then started again;
2. each instance in turn gets SIGTERM, is waited for and started again (a rolling restart),
   the next one only once HAProxy sends the restarted one traffic again.

Then every receipt a client was given must be in the database (none lost), each key must
have exactly one receipt, the quota counter must equal the executions stored, and the log
exported afterwards must extend the checkpoints published before the kill and before the
rolling restart. The rolling restart must cost no request an error at all; the kill may
cost some, but none that a retry does not fix.

The figures (requests, acknowledged receipts, receipts found, errors per phase) are
printed — ``pytest -s`` shows them — and carried in the assertion messages.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from execauth.store.database import normalize_url
from tests.conftest import POSTGRES_URL, REDIS_URL, fresh_postgres_database
from tests.deploy.tls import self_signed_pem
from tests.serving import clean_env, free_port, provision_org, run_cli, spawn_service
from tests.store.test_ledger import leaf, note_parts

pytestmark = pytest.mark.e2e

REPOSITORY = Path(__file__).resolve().parents[2]
HAPROXY_CONFIG = REPOSITORY / "deploy" / "haproxy" / "haproxy.cfg"
HAPROXY = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
INSTANCES = 3
CLIENTS = 12
ATTEMPTS = 8  # per request: the first try and up to seven retries under the same key
ACKNOWLEDGED_BEFORE_KILL = 100
ACKNOWLEDGED_AFTER_KILL = 60  # on the two survivors, before the killed one returns
STEP_LIMIT_SECONDS = 30.0  # for any one step to happen (a restart, traffic resuming)
SEQUENCING_LIMIT_SECONDS = 20.0
RETRYABLE = {502, 503, 504}
ADMIN_TOKEN = "service_admin_" + secrets.token_urlsafe(32)
PLANS = {
    "free": {"executes_per_month": 1000, "requests_per_minute": 5000},
    # Metered, so the usage counter is kept, but large enough never to answer 429.
    "metered": {"executes_per_month": 1_000_000, "requests_per_minute": 1_000_000},
}
BODIES: list[dict[str, object]] = [
    {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}},
    {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "dev"}},
    {"surface": "deploy.production", "actor": "release-bot"},  # SILENCE: missing context
]
KILL, ROLLING = "kill", "rolling restart"


@dataclass
class Load:
    """What the clients did and saw, by phase (the phase in force when an attempt ended)."""

    phase: str = "warm-up"
    requests: int = 0  # distinct idempotency keys sent
    attempts: Counter[str] = field(default_factory=Counter)
    errors: dict[str, Counter[str]] = field(default_factory=dict)
    receipts: dict[str, set[bytes]] = field(default_factory=dict)  # key -> bodies answered
    unresolved: list[str] = field(default_factory=list)  # keys no retry got a receipt for
    checkpoints: dict[str, str] = field(default_factory=dict)  # phase -> one published before

    def error(self, phase: str, outcome: str) -> None:
        self.errors.setdefault(phase, Counter())[outcome] += 1

    def failed(self, phase: str) -> int:
        return sum(self.errors.get(phase, Counter()).values())

    @property
    def acknowledged(self) -> int:
        return len(self.receipts)


@dataclass
class Topology:
    """The running topology and everything observed while it was loaded and broken."""

    proxy_url: str
    instance_urls: list[str]
    org_id: str
    trust: ssl.SSLContext
    load: Load
    stopped: list[tuple[int | None, str]]  # (exit code, log) of each instance sent SIGTERM
    stored: set[str] = field(default_factory=set)  # receipt ids in the database
    usage: int = 0  # the org's usage counter
    audits: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)
    bundle: dict[str, Any] = field(default_factory=dict)
    logs: str = ""  # every instance's log, all generations

    @property
    def acknowledged_ids(self) -> set[str]:
        return {
            json.loads(body)["receipt_id"]
            for bodies in self.load.receipts.values()
            for body in bodies
        }

    @property
    def figures(self) -> str:
        load = self.load
        found = len(self.acknowledged_ids & self.stored)
        return (
            f"topology (HAProxy, {INSTANCES} instances, PostgreSQL"
            f"{', Redis' if REDIS_URL else ''}): requests {load.requests}, attempts "
            f"{sum(load.attempts.values())}, acknowledged receipts {load.acknowledged}, "
            f"receipts found {found}, lost {len(self.acknowledged_ids - self.stored)}, "
            f"unresolved after retries {len(load.unresolved)}; errors before the kill "
            f"{dict(load.errors.get('warm-up', {}))}; errors during the kill "
            f"{load.failed(KILL)} {dict(load.errors.get(KILL, {}))} of "
            f"{load.attempts[KILL]} attempts; errors during the rolling restart "
            f"{load.failed(ROLLING)} {dict(load.errors.get(ROLLING, {}))} of "
            f"{load.attempts[ROLLING]} attempts; usage counter {self.usage}, executions "
            f"stored {len(self.stored)}; log size {self.bundle.get('tree_size')}"
        )


@pytest.fixture(scope="module")
def database_url() -> Iterator[str]:
    if HAPROXY is None:
        pytest.skip("the topology test needs HAProxy (`make test` installs Debian's haproxy)")
    if not POSTGRES_URL:
        pytest.skip("the topology test needs EXECAUTH_TEST_POSTGRES_URL (set by .ci/run)")
    with fresh_postgres_database("execauth_topology_") as url:
        yield url


def start_proxy(
    workdir: Path, port: int, certificate: Path, gateways: list[int]
) -> subprocess.Popen[bytes]:
    """``haproxy -db -f deploy/haproxy/haproxy.cfg`` with its addresses in the environment."""
    assert HAPROXY is not None
    env = clean_env(
        EXECAUTH_LB_BIND=f"127.0.0.1:{port}",
        EXECAUTH_LB_CERT=str(certificate),
        **{f"EXECAUTH_GATEWAY_{i + 1}": f"127.0.0.1:{p}" for i, p in enumerate(gateways)},
    )
    with (workdir / "haproxy.log").open("w") as log:
        return subprocess.Popen(
            [HAPROXY, "-db", "-f", str(HAPROXY_CONFIG)], env=env, cwd=workdir, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def wait_until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + STEP_LIMIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {STEP_LIMIT_SECONDS} s"
        time.sleep(0.1)


def answered_executes(instance_url: str) -> int:
    """Executes this instance answered since it started (its own /metrics)."""
    try:
        metrics = httpx.get(instance_url + "/metrics", timeout=2).text
    except httpx.TransportError:
        return 0
    counts = re.findall(
        r'^execauth_execute_responses_total\{status="\d+"\} ([0-9.e+]+)$', metrics, re.M
    )
    return int(sum(float(n) for n in counts))


def outcome(response: httpx.Response) -> str:
    """What an error answer was: the service's error code and message, or HAProxy's page."""
    try:
        error = response.json()
    except ValueError:
        return f"{response.status_code} from HAProxy"
    if isinstance(error, dict) and isinstance(error.get("error"), str):
        return f"{response.status_code} {error['error']}: {error.get('message')}"
    return str(response.status_code)


def proxy_ready(proxy_url: str, trust: ssl.SSLContext) -> bool:
    try:
        return httpx.get(proxy_url + "/readyz", verify=trust, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


async def drive(
    topology: Topology,
    secret: str,
    instances: list[subprocess.Popen[bytes]],
    logs: list[Path],
    start: Any,
) -> None:
    """Load through the proxy while one instance is killed, then all restarted in turn."""
    load = topology.load
    stop = asyncio.Event()
    auth = {"Authorization": f"Bearer {secret}"}
    limits = httpx.Limits(max_connections=CLIENTS + 2)
    async with httpx.AsyncClient(
        base_url=topology.proxy_url, verify=topology.trust, timeout=30, limits=limits
    ) as client:

        async def one_client(offset: int) -> None:
            sent = 0
            while not stop.is_set():
                key, body = f"c{offset}-{sent}", BODIES[(offset + sent) % len(BODIES)]
                sent += 1
                load.requests += 1
                for attempt in range(ATTEMPTS):
                    try:
                        response = await client.post(
                            "/v1/execute", json=body, headers=auth | {"Idempotency-Key": key}
                        )
                    except httpx.TransportError as exc:
                        # An attempt counts in the phase it ended in: one in flight when
                        # an instance is killed belongs to the kill.
                        load.attempts[phase := load.phase] += 1
                        load.error(phase, type(exc).__name__)
                    else:
                        load.attempts[phase := load.phase] += 1
                        if response.status_code == 200:
                            load.receipts.setdefault(key, set()).add(response.content)
                            break
                        load.error(phase, outcome(response))
                        if response.status_code not in RETRYABLE:
                            load.unresolved.append(key)
                            break
                    await asyncio.sleep(0.1 * (attempt + 1))  # back off, as the SDKs do
                else:
                    load.unresolved.append(key)

        async def checkpoint() -> str | None:
            published = await client.get("/operator/log/checkpoint", headers=auth)
            return published.json()["checkpoint"] if published.status_code == 200 else None

        async def acknowledged_at_least(count: int) -> None:
            deadline = time.monotonic() + STEP_LIMIT_SECONDS
            while load.acknowledged < count:
                assert time.monotonic() < deadline, f"fewer than {count} receipts: {load}"
                await asyncio.sleep(0.05)

        async def back_in_rotation(index: int) -> None:
            # HAProxy sends a restarted instance traffic once its /readyz checks pass.
            url = topology.instance_urls[index]
            deadline = time.monotonic() + STEP_LIMIT_SECONDS
            while await asyncio.to_thread(answered_executes, url) == 0:
                assert time.monotonic() < deadline, f"instance {index + 1} got no traffic again"
                await asyncio.sleep(0.1)

        async def break_things() -> None:
            try:
                await acknowledged_at_least(ACKNOWLEDGED_BEFORE_KILL)
                load.checkpoints[KILL] = await checkpoint() or ""
                load.phase = KILL
                os.killpg(instances[0].pid, signal.SIGKILL)
                await asyncio.to_thread(instances[0].wait, 20)
                await acknowledged_at_least(load.acknowledged + ACKNOWLEDGED_AFTER_KILL)
                instances[0] = await asyncio.to_thread(start, 0, "restarted-after-kill")
                await back_in_rotation(0)
                load.checkpoints[ROLLING] = await checkpoint() or ""
                load.phase = ROLLING
                for index in range(INSTANCES):
                    instances[index].terminate()  # SIGTERM: stop listening, drain, exit
                    await asyncio.to_thread(instances[index].wait, 40)
                    topology.stopped.append((instances[index].returncode, logs[index].read_text()))
                    instances[index] = await asyncio.to_thread(start, index, "rolled")
                    await back_in_rotation(index)
                load.phase = "after"
                await acknowledged_at_least(load.acknowledged + CLIENTS)
            finally:
                stop.set()

        await asyncio.gather(break_things(), *(one_client(i) for i in range(CLIENTS)))


def wait_for_sequencing(topology: Topology, secret: str, size: int) -> None:
    auth = {"Authorization": f"Bearer {secret}"}
    deadline = time.monotonic() + SEQUENCING_LIMIT_SECONDS
    while True:
        published = httpx.get(
            topology.proxy_url + "/operator/log/checkpoint", headers=auth, verify=topology.trust
        )
        if published.status_code == 200 and published.json()["tree_size"] >= size:
            return
        assert time.monotonic() < deadline, f"the log did not reach {size} entries"
        time.sleep(0.25)


@pytest.fixture(scope="module")
def topology(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    workdir = tmp_path_factory.mktemp("topology")
    proxy_port, ports = free_port(), [free_port() for _ in range(INSTANCES)]
    proxy_url = f"https://127.0.0.1:{proxy_port}"
    settings = {
        "EXECAUTH_DATABASE_URL": database_url,
        "EXECAUTH_SECRET_KEY": secrets.token_urlsafe(32),
        "EXECAUTH_ADMIN_TOKEN": ADMIN_TOKEN,
        "EXECAUTH_ISSUER": proxy_url,  # the public URL, not an instance's
        "EXECAUTH_PLANS": json.dumps(PLANS),
        "EXECAUTH_MIGRATE_ON_START": "false",
        "EXECAUTH_FORWARDED_ALLOW_IPS": "127.0.0.1",
        # This machine (2 cores) also runs PostgreSQL, Redis, HAProxy, the clients and
        # other test processes; with the default 0.5 s bound a few runs here got two 503
        # "rate limiter is unavailable" answers (docs/deploy.md, "Sizing").
        "EXECAUTH_RATE_LIMIT_TIMEOUT_SECONDS": "2",
    }
    if REDIS_URL:
        settings["EXECAUTH_REDIS_URL"] = REDIS_URL
    env = clean_env(**settings)
    migrated = run_cli(env, workdir, "db", "upgrade")
    assert migrated.returncode == 0, migrated.stderr

    logs = [workdir / "unused.log"] * INSTANCES  # each instance's current log

    def start(index: int, generation: str) -> subprocess.Popen[bytes]:
        logs[index] = workdir / f"gateway{index + 1}-{generation}.log"
        return spawn_service(env, workdir, ports[index], log_name=logs[index].name)

    certificate, pem = self_signed_pem(workdir)
    trust = ssl.create_default_context(cafile=str(certificate))
    instances = [start(i, "first") for i in range(INSTANCES)]
    proxy = start_proxy(workdir, proxy_port, pem, ports)
    try:
        wait_until(lambda: proxy_ready(proxy_url, trust), "HAProxy answering /readyz")
        org_id, _, secret = provision_org(
            f"http://127.0.0.1:{ports[1]}", ADMIN_TOKEN, plan="metered"
        )
        result = Topology(
            proxy_url=proxy_url,
            instance_urls=[f"http://127.0.0.1:{p}" for p in ports],
            org_id=org_id,
            trust=trust,
            load=Load(),
            stopped=[],
        )
        asyncio.run(drive(result, secret, instances, logs, start))

        engine = create_engine(normalize_url(database_url))
        with engine.connect() as conn:
            result.stored = set(
                conn.execute(
                    text("SELECT receipt_id FROM executions WHERE org_id = :org"), {"org": org_id}
                ).scalars()
            )
            result.usage = conn.execute(
                text("SELECT coalesce(sum(executes), 0) FROM usage_counters WHERE org_id = :org"),
                {"org": org_id},
            ).scalar_one()
        engine.dispose()
        wait_for_sequencing(result, secret, len(result.stored))
        cli_env = env | {"EXECAUTH_URL": result.instance_urls[2]}
        # The whole log's leaf hashes and its latest checkpoint, but no receipts: each would
        # cost its own inclusion proof, and those are not what this test is about.
        since = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        exported = run_cli(
            cli_env, workdir, "export", "--org", org_id, "--since", since, "-o", "bundle.json"
        )
        assert exported.returncode == 0, exported.stderr
        result.bundle = json.loads((workdir / "bundle.json").read_text())
        for phase, note in result.load.checkpoints.items():
            saved = workdir / f"before-{phase.replace(' ', '-')}.checkpoint"
            saved.write_text(note)
            result.audits[phase] = run_cli(
                cli_env,
                workdir,
                "audit",
                "verify",
                "bundle.json",
                "--trusted-checkpoint",
                str(saved),
            )
        result.logs = "".join(log.read_text() for log in sorted(workdir.glob("gateway*.log")))
        print("\n" + result.figures)
        yield result
    finally:
        for process in [proxy, *instances]:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in [proxy, *instances]:
            try:
                process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def test_every_acknowledged_receipt_is_stored_after_the_kill_and_the_rolling_restart(
    topology: Topology,
) -> None:
    assert topology.load.acknowledged >= ACKNOWLEDGED_BEFORE_KILL, topology.figures
    assert topology.acknowledged_ids <= topology.stored, topology.figures


def test_each_idempotency_key_got_one_receipt_whichever_instance_answered(
    topology: Topology,
) -> None:
    repeated = {key: bodies for key, bodies in topology.load.receipts.items() if len(bodies) > 1}
    assert repeated == {}, topology.figures


def test_every_request_of_the_kill_got_its_receipt_by_retrying_its_key(
    topology: Topology,
) -> None:
    assert topology.load.attempts[KILL] > 0, topology.figures
    assert topology.load.unresolved == [], topology.figures


def test_the_rolling_restart_fails_no_request(topology: Topology) -> None:
    assert topology.load.attempts[ROLLING] > 0, topology.figures
    assert topology.load.failed(ROLLING) == 0, topology.figures


def test_sigterm_stops_each_instance_after_a_complete_shutdown(topology: Topology) -> None:
    # uvicorn shuts down, then exits by the signal it caught (-15), as a shell expects.
    assert [code for code, _ in topology.stopped] == [-signal.SIGTERM] * INSTANCES
    assert all("Application shutdown complete" in log for _, log in topology.stopped)


def test_the_quota_counts_each_stored_execution_exactly_once(topology: Topology) -> None:
    assert topology.usage == len(topology.stored), topology.figures
    assert len(topology.stored) == topology.load.acknowledged, topology.figures


def test_the_log_extends_the_checkpoints_published_before_the_kill_and_the_restart(
    topology: Topology,
) -> None:
    logged = set(topology.bundle["leaf_hashes"])
    acknowledged = [json.loads(b) for bodies in topology.load.receipts.values() for b in bodies]
    assert all(leaf(receipt).hex() in logged for receipt in acknowledged), topology.figures
    assert set(topology.audits) == {KILL, ROLLING}
    for phase, audit in topology.audits.items():
        assert audit.returncode == 0, f"{phase}: {audit.stdout}{audit.stderr}"
        assert "consistent with the trusted checkpoint" in audit.stdout, phase


def test_receipts_and_checkpoints_through_the_proxy_name_the_public_issuer(
    topology: Topology,
) -> None:
    issuers = {
        json.loads(body)["issuer"] for bodies in topology.load.receipts.values() for body in bodies
    }
    assert issuers == {topology.proxy_url}
    origin, _, _, _ = note_parts(topology.load.checkpoints[ROLLING])
    assert origin == topology.proxy_url.removeprefix("https://") + f"/log/{topology.org_id}"


def test_requests_through_the_proxy_arrive_for_the_issuers_origin(
    topology: Topology,
) -> None:
    # api/origin_check.py warns when a Host differs from the issuer's. Requests through
    # the proxy are https (its X-Forwarded-Proto, believed) and carry the public Host;
    # the test's own direct http requests to each instance (/readyz, /metrics) do warn.
    assert "requests arrive for http://" in topology.logs
    assert "requests arrive for https://" not in topology.logs


def test_the_console_cookie_is_secure_behind_tls_termination(topology: Topology) -> None:
    page = httpx.get(topology.proxy_url + "/console/login", verify=topology.trust)
    assert page.status_code == 200
    assert "secure" in page.headers["set-cookie"].lower()
