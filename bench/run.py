"""Load benchmark: execauth vs. a plain Starlette handler vs. the Cerbos PDP, under wrk.

    .venv/bin/python bench/run.py [--duration 20] [--postgres] [--profile] [--micro] [--in-process]

Each target is started as a subprocess on a free port, warmed up, then driven by
``wrk -t2 -c32 -d<duration>s`` (bench/wrk/*.lua); the table goes to stdout and, with
the machine's description, to ``bench/results/<timestamp>.json``.

- **execauth**: the real ``execauth serve`` (``--workers``, default one per core, SQLite WAL with
  ``synchronous=FULL``, group commit) on a fresh database; an organization on an
  unmetered plan with a rate limit far above the load (the limiter still runs),
  an execute key, and bench/policy.yaml (10 rules across 3 surfaces). Every
  request is a PERMIT with a fresh Idempotency-Key: evaluated, signed, committed.
- **baseline**: bench/baseline_app.py, the same server stack and worker count with a
  trivial handler.
- **cerbos**: the Cerbos PDP (``npm install @cerbos/cerbos-linux-x64`` into
  bench/.cerbos), bench/cerbos/policies, decision log to a file; its default
  GOMAXPROCS (all cores).

``--postgres`` adds execauth on PostgreSQL (``EXECAUTH_TEST_POSTGRES_URL``, else
``postgresql://postgres@127.0.0.1:5432/test``), in a database created for the run and
dropped after. ``--profile`` records execauth under the same load with py-spy
(bench/results/profile-<timestamp>.svg/.speedscope.json and a top-functions table),
in a separate pass so that sampling does not disturb the measured run. ``--micro`` runs
the pytest-benchmark micro benchmarks (bench/micro) instead of the load benchmark;
``--in-process`` the gateway's CPU per execute in process (bench/in_process.py).
``--rounds N`` repeats the whole run N times and reports the median of each run's ratios
(bench/rounds.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
BIN = Path(sys.executable).parent
RESULTS = BENCH / "results"
WRK_DIR = BENCH / "wrk"
CERBOS_BIN = BENCH / ".cerbos/node_modules/@cerbos/cerbos-linux-x64/cerbos-linux-x64"
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
JSON_MARK = "BENCH_JSON "
EXTRA_SETTINGS: dict[str, str] = {}

# The bench plan: no monthly quota, a per-minute limit far above what two cores can
# serve, so the limiter runs on every request without ever refusing one.
EXECAUTH_TOML = """\
[plans.bench]
unmetered = true
requests_per_minute = 100000000
"""


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# --- processes ----------------------------------------------------------------------------
@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path
    workers: str
    extra: dict[str, Any] = field(default_factory=dict)
    # What a second instance needs to join this one; never written to the results.
    private: dict[str, str] = field(default_factory=dict)


@contextlib.contextmanager
def started(
    name: str,
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    url: str,
    ready_path: str,
    workers: str,
    ready_method: str = "GET",
) -> Iterator[Server]:
    """Run ``argv`` in its own process group until the block ends; yield once it answers."""
    log_path = cwd / f"{name}.log"
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = Server(name, process, url, log_path, workers)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited ({process.returncode}):\n{log_path.read_text()}")
            try:
                if httpx.request(ready_method, url + ready_path, timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not become ready:\n{log_path.read_text()}")
            time.sleep(0.2)
        yield server
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group we started, SIGKILL it if it lingers."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)


def uvicorn_workers(count: int) -> str:
    return f"{count} (uvicorn worker{'s' if count > 1 else ''})"


def clean_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXECAUTH_")}
    return env | settings


# --- targets ------------------------------------------------------------------------------
@contextlib.contextmanager
def execauth_server(
    workdir: Path,
    database_url: str,
    name: str,
    workers: int,
    *,
    joining: Server | None = None,
    otel: dict[str, str] | None = None,
) -> Iterator[Server]:
    """``execauth serve`` with an org, an execute key and bench/policy.yaml in place.

    ``otel``: the OTEL_* variables to run it with; without them tracing is off, whatever
    the shell running the benchmark has set.

    ``joining``: a second instance on the same database, with the first one's secret
    key, admin token and execute key (the org and policy are already there).
    """
    home = workdir / name
    home.mkdir()
    (home / "execauth.toml").write_text(EXECAUTH_TOML)
    admin = joining.private["admin"] if joining else "service_admin_" + secrets.token_urlsafe(24)
    secret_key = joining.private["secret_key"] if joining else secrets.token_urlsafe(32)
    port = free_port()
    env = clean_env(
        EXECAUTH_DATABASE_URL=database_url,
        EXECAUTH_ADMIN_TOKEN=admin,
        EXECAUTH_SECRET_KEY=secret_key,
        EXECAUTH_CONFIG_FILE=str(home / "execauth.toml"),
        EXECAUTH_ISSUER=joining.private["issuer"] if joining else f"http://127.0.0.1:{port}",
    )
    env = {k: v for k, v in env.items() if not k.startswith("OTEL_")} | (otel or {})
    env |= EXTRA_SETTINGS  # --set NAME=VALUE: a setting to try (recorded in the JSON)
    argv = [
        str(BIN / "execauth"),
        "serve",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--log-level",
        "warning",
    ]
    url = f"http://127.0.0.1:{port}"
    with started(
        name,
        argv,
        env=env,
        cwd=home,
        url=url,
        ready_path="/readyz",
        workers=uvicorn_workers(workers),
    ) as server:
        api_key = joining.extra["api_key"] if joining else provision(url, admin)
        server.extra["api_key"] = api_key
        server.extra["database"] = urlsplit(database_url).scheme
        check_execauth(url, api_key)
        issuer = env["EXECAUTH_ISSUER"]
        server.private |= {"admin": admin, "secret_key": secret_key, "issuer": issuer}
        yield server


@contextlib.contextmanager
def otlp_sink() -> Iterator[dict[str, int]]:
    """An OTLP/HTTP endpoint on loopback that takes span batches and discards them.

    What the traced run pays is execauth's side: building spans and exporting them.
    Decoding and storing them is the collector's work, left out (counts only).
    """
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    counts = {"requests": 0, "bytes": 0}

    class Sink(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a collector offers

        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length", "0"))
            self.rfile.read(size)
            counts["requests"] += 1
            counts["bytes"] += size
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    counts["port"] = server.server_address[1]
    try:
        yield counts
    finally:
        server.shutdown()
        server.server_close()


def provision(url: str, admin: str) -> str:
    """Create the org, its execute key and the policy through the console API (README)."""
    headers = {"Authorization": f"Bearer {admin}"}
    with httpx.Client(base_url=url, headers=headers, timeout=10) as client:
        org = client.post("/console/v1/orgs", json={"name": "Bench", "plan": "bench"})
        org.raise_for_status()
        org_id = org.json()["org_id"]
        key = client.post(
            f"/console/v1/orgs/{org_id}/keys", json={"name": "wrk", "role": "execute"}
        )
        key.raise_for_status()
        policy = client.put(
            f"/console/v1/orgs/{org_id}/policies/bench",
            content=(BENCH / "policy.yaml").read_bytes(),
            headers={"content-type": "application/yaml"},
        )
        policy.raise_for_status()
        api_key: str = key.json()["api_key"]
        return api_key


def check_execauth(url: str, api_key: str) -> None:
    """The wrk request must be a PERMIT: otherwise we would be measuring something else."""
    body = json.loads(wrk_body_sample())
    response = httpx.post(
        url + "/v1/execute",
        json=body,
        headers={"Authorization": f"Bearer {api_key}", "Idempotency-Key": "bench-check"},
        timeout=10,
    )
    response.raise_for_status()
    decision = response.json()["decision"]
    if decision != "PERMIT":
        raise RuntimeError(f"the benchmark request is not a PERMIT: {response.text}")


def wrk_body_sample() -> str:
    """The body execauth.lua sends (counter 0), for the pre-flight check."""
    return json.dumps(
        {
            "surface": "deploy.production",
            "action": "deploy",
            "actor": "release-bot",
            "context": {"branch": "main", "ticket": "CHG-4821", "pipeline": "gh-actions/0"},
            "payload": {
                "service": "checkout-api",
                "image": "registry.example/checkout-api@sha256:9f2c1e7ab04d33c5e8f6a1b2c3d4e5f6"
                "0718293a4b5c6d7e8f90a1b2c3d4e5f6",
                "replicas": 6,
                "region": "eu-west-1",
                "commit": "4f9d2a1c",
                "canary": True,
            },
        }
    )


@contextlib.contextmanager
def baseline_server(workdir: Path, workers: int) -> Iterator[Server]:
    port = free_port()
    argv = [
        sys.executable,
        str(BENCH / "baseline_app.py"),
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]
    with started(
        "baseline",
        argv,
        env=clean_env(),
        cwd=workdir,
        url=f"http://127.0.0.1:{port}",
        ready_path="/readyz",
        workers=uvicorn_workers(workers),
    ) as server:
        yield server


@contextlib.contextmanager
def cerbos_server(workdir: Path) -> Iterator[Server]:
    if not CERBOS_BIN.exists():
        raise RuntimeError(
            "Cerbos is not installed: npm install --prefix bench/.cerbos @cerbos/cerbos-linux-x64"
        )
    http_port, grpc_port = free_port(), free_port()
    audit = workdir / "cerbos-audit.log"
    env = clean_env(
        CERBOS_HTTP_PORT=str(http_port),
        CERBOS_GRPC_PORT=str(grpc_port),
        CERBOS_POLICY_DIR=str(BENCH / "cerbos/policies"),
        CERBOS_AUDIT_FILE=str(audit),
    )
    argv = [
        str(CERBOS_BIN),
        "server",
        f"--config={BENCH / 'cerbos/config.yaml'}",
        "--log-level=warn",
    ]
    url = f"http://127.0.0.1:{http_port}"
    workers = f"Go runtime, GOMAXPROCS={os.environ.get('GOMAXPROCS', os.cpu_count())} (default)"
    with started(
        "cerbos",
        argv,
        env=env,
        cwd=workdir,
        url=url,
        ready_path="/_cerbos/health",
        workers=workers,
    ) as server:
        check_cerbos(url)
        server.extra["audit_file"] = str(audit)
        yield server
        server.extra["audit_bytes"] = audit.stat().st_size if audit.exists() else 0


def check_cerbos(url: str) -> None:
    body = {
        "requestId": "bench-check",
        "principal": {"id": "release-bot", "roles": ["release"], "attr": {"team": "release"}},
        "resources": [
            {
                "actions": ["deploy"],
                "resource": {
                    "kind": "deployment",
                    "id": "checkout-api",
                    "attr": {"branch": "main", "ticket": "CHG-4821", "replicas": 6},
                },
            }
        ],
    }
    response = httpx.post(url + "/api/check/resources", json=body, timeout=10)
    response.raise_for_status()
    effect = response.json()["results"][0]["actions"]["deploy"]
    if effect != "EFFECT_ALLOW":
        raise RuntimeError(f"the Cerbos benchmark request is not allowed: {response.text}")


# --- PostgreSQL ---------------------------------------------------------------------------
@contextlib.contextmanager
def fresh_postgres_database(admin_url: str) -> Iterator[str]:
    """Create a database for this run on ``admin_url``'s server; drop it afterwards."""
    import psycopg

    name = f"execauth_bench_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(admin_url)
    try:
        yield urlunsplit(parts._replace(path="/" + name))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- wrk ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Load:
    threads: int
    connections: int
    duration: int
    warmup: int


def run_wrk(
    url: str, script: str, load: Load, seconds: int, env_extra: dict[str, str]
) -> dict[str, Any]:
    argv = [
        "wrk",
        f"-t{load.threads}",
        f"-c{load.connections}",
        f"-d{seconds}s",
        "--timeout",
        "10s",
        "--latency",
        "-s",
        str(WRK_DIR / script),
        url,
    ]
    env = os.environ | env_extra | {"BENCH_WRK_DIR": str(WRK_DIR)}
    env["BENCH_RUN_ID"] = secrets.token_hex(4)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=seconds + 60)
    if result.returncode != 0:
        raise RuntimeError(f"wrk failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    for line in result.stdout.splitlines():
        if line.startswith(JSON_MARK):
            data: dict[str, Any] = json.loads(line[len(JSON_MARK) :])
            data["wrk_output"] = result.stdout
            return data
    raise RuntimeError(f"wrk printed no {JSON_MARK.strip()} line:\n{result.stdout}")


def cpu_seconds(pid: int, *, system_only: bool = False) -> float:
    """User + system CPU time of a process and its live children (uvicorn's workers),
    all threads included (/proc/PID/stat); with ``system_only``, the kernel's part alone
    (system calls, wake-ups: what a process hop costs besides the interpreter)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[12]) if system_only else int(fields[11]) + int(fields[12])
    total = ticks / os.sysconf("SC_CLK_TCK")
    for child in child_pids(pid):
        with contextlib.suppress(OSError):  # a child that ended meanwhile
            total += cpu_seconds(child, system_only=system_only)
    return total


def counters_by_process(pid: int) -> dict[str, tuple[float, float, int]]:
    """Per process (``pid`` and each descendant), by process title (``ps``'s ``args``:
    ``execauth: writer``, ``execauth: gateway 1/2``; docs/observability.md): CPU
    seconds; seconds its threads were ready to run but waited for a core
    (``/proc/PID/task/*/schedstat``: a process that waits there holds up whoever waits
    for it); bytes it had written to storage (``/proc/PID/io``: the database's WAL,
    checkpoints, logs)."""
    own = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    name = process_name(pid)
    cpu = (int(own[11]) + int(own[12])) / os.sysconf("SC_CLK_TCK")
    waited = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError):  # a thread that ended; no schedstats
            waited += int((task / "schedstat").read_text().split()[1]) / 1e9
    written = 0
    with contextlib.suppress(OSError):  # another user's process: /proc/PID/io is private
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("write_bytes:"):
                written = int(line.split()[1])
    counters = {f"{name} [{pid}]": (cpu, waited, written)}
    for child in child_pids(pid):
        with contextlib.suppress(OSError):  # a child that ended meanwhile
            counters.update(counters_by_process(child))
    return counters


def process_name(pid: int) -> str:
    """A process's title if it set one (``execauth: writer``, ``execauth: gateway 1/2``;
    docs/observability.md), else its program's name."""
    title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    return title if title.startswith("execauth:") else Path(title.split(" ", 1)[0]).name


def connections_by_process(pid: int, port: int) -> dict[str, int]:
    """Per process (``pid`` and each descendant), by ``process_name``: the established
    TCP connections it holds on the server's ``port``. wrk
    opens its connections when it starts and keeps them, so this split, taken during a
    run, is how the load was shared between the gateways for the whole run (uvicorn's
    workers accept from one shared socket, first come, first served)."""
    established: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if local_port == port and fields[3] == "01":  # 01: ESTABLISHED
                    established.add(f"socket:[{fields[9]}]")
    held = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            held += os.readlink(fd) in established
    counts = {f"{process_name(pid)} [{pid}]": held} if held else {}
    for child in child_pids(pid):
        with contextlib.suppress(OSError):  # a child that ended meanwhile
            counts.update(connections_by_process(child, port))
    return counts


def machine_cpu_seconds(stat_text: str) -> dict[str, float]:
    """All cores' seconds since boot, from ``/proc/stat``'s ``cpu`` line: ``busy``
    (running anything, the kernel included), ``idle``, ``iowait`` (idle while a disk
    request was pending: an fsync waited for with nothing else to run) and ``steal``
    (the hypervisor ran something else on the core: a VM's speed that moves).
    ``guest`` and ``guest_nice`` are left out: ``user`` and ``nice`` include them.
    """
    for line in stat_text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            user, nice, system, idle, iowait, irq, softirq, steal = (
                int(value) / os.sysconf("SC_CLK_TCK") for value in fields[1:9]
            )
            return {
                "busy": user + nice + system + irq + softirq,
                "idle": idle,
                "iowait": iowait,
                "steal": steal,
            }
    raise ValueError("no aggregate cpu line in /proc/stat")


def waited_children_cpu_seconds() -> float:
    """User + system CPU of this process's children that have ended and been waited
    for: around one ``subprocess.run`` of wrk, what the load generator itself used."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def child_pids(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            children += [int(c) for c in (task / "children").read_text().split()]
    return children


def measure(server: Server, script: str, load: Load, env_extra: dict[str, str]) -> dict[str, Any]:
    if load.warmup:
        log(f"{server.name}: warm-up {load.warmup}s")
        run_wrk(server.url, script, load, load.warmup, env_extra)
    log(f"{server.name}: wrk -t{load.threads} -c{load.connections} -d{load.duration}s")
    cpu_before = cpu_seconds(server.process.pid)
    system_before = cpu_seconds(server.process.pid, system_only=True)
    by_process_before = counters_by_process(server.process.pid)
    connections: dict[str, int] = {}
    port = urlsplit(server.url).port or 80
    halfway = threading.Timer(
        load.duration / 2,
        lambda: connections.update(connections_by_process(server.process.pid, port)),
    )
    machine_before = machine_cpu_seconds(Path("/proc/stat").read_text())
    load_tool_before = waited_children_cpu_seconds()
    window_started = time.monotonic()
    halfway.start()
    try:
        raw = run_wrk(server.url, script, load, load.duration, env_extra)
    finally:
        halfway.cancel()
        halfway.join()  # a count taken as wrk ended is complete before it is read
    window = time.monotonic() - window_started
    load_tool_used = waited_children_cpu_seconds() - load_tool_before
    machine_after = machine_cpu_seconds(Path("/proc/stat").read_text())
    machine = {kind: machine_after[kind] - machine_before[kind] for kind in machine_after}
    cpu_used = cpu_seconds(server.process.pid) - cpu_before
    system_used = cpu_seconds(server.process.pid, system_only=True) - system_before
    by_process = {
        name: tuple(
            after - before
            for after, before in zip(counters, by_process_before.get(name, (0, 0, 0)), strict=True)
        )
        for name, counters in counters_by_process(server.process.pid).items()
    }
    per_request = 1 / max(raw["requests"], 1)
    errors = raw["errors"]
    lat = raw["latency_us"]
    row = {
        "target": server.name,
        "workers": server.workers,
        "requests": raw["requests"],
        "rps": raw["requests"] / (raw["duration_us"] / 1e6),
        "p50_ms": lat["p50"] / 1000,
        "p90_ms": lat["p90"] / 1000,
        "p99_ms": lat["p99"] / 1000,
        "p999_ms": lat["p999"] / 1000,
        "max_ms": lat["max"] / 1000,
        "server_cpu_percent": 100 * cpu_used / (raw["duration_us"] / 1e6),
        "server_cpu_us_per_request": 1e6 * cpu_used / max(raw["requests"], 1),
        # Of that, the kernel's time: system calls and the wake-ups between processes.
        "server_system_cpu_us_per_request": 1e6 * system_used / max(raw["requests"], 1),
        # Where the CPU went: the writer process against the gateways (serve --workers N).
        "server_cpu_us_per_request_by_process": {
            name: round(1e6 * counters[0] * per_request, 1)
            for name, counters in sorted(by_process.items())
            if counters[0] > 0
        },
        # Time each process was ready to run but had no core: a serial stage (the writer)
        # that waits there holds up every request behind it while cores look busy.
        "server_runqueue_wait_us_per_request_by_process": {
            name: round(1e6 * counters[1] * per_request, 1)
            for name, counters in sorted(by_process.items())
            if counters[0] > 0
        },
        # Bytes written to storage (WAL frames, checkpoints, the decision log).
        "server_disk_write_kib_per_request_by_process": {
            name: round(counters[2] / 1024 * per_request, 2)
            for name, counters in sorted(by_process.items())
            if counters[2] > 0
        },
        # The client's connections each process held halfway through the run: how the
        # gateways shared the load (docs/performance.md, "The fast-state round").
        "server_connections_by_process": connections,
        # The whole machine over the same window (wrk's start and exit included), in
        # percent of one core like server_cpu_percent: what the load generator used, what
        # other processes used (PostgreSQL on --postgres, the kernel's threads), and what
        # no process used (plain idle, and idle with a disk write pending), and what the
        # hypervisor took. Idle cores while the server is the bound mean its requests
        # wait on something other than a core (docs/performance.md).
        "load_tool_cpu_percent": 100 * load_tool_used / window,
        "load_tool_cpu_us_per_request": 1e6 * load_tool_used * per_request,
        "machine_other_cpu_percent": 100
        * max(machine["busy"] - load_tool_used - cpu_used, 0.0)
        / window,
        "machine_idle_percent": 100 * machine["idle"] / window,
        "machine_iowait_percent": 100 * machine["iowait"] / window,
        "machine_steal_percent": 100 * machine["steal"] / window,
        "non_2xx": errors["status"],
        "socket_errors": errors["connect"] + errors["read"] + errors["write"] + errors["timeout"],
        "wrk": raw,
    }
    row["errors"] = row["non_2xx"] + row["socket_errors"]
    log(
        f"{server.name}: {row['rps']:,.0f} req/s, p50 {row['p50_ms']:.2f} ms, "
        f"p99 {row['p99_ms']:.2f} ms, errors {row['errors']}"
    )
    split = row["server_cpu_us_per_request_by_process"]
    log(
        f"{server.name}: CPU µs per request by process: "
        + ", ".join(f"{name} {us:.0f}" for name, us in split.items())
        + f"; in the kernel (all processes) {row['server_system_cpu_us_per_request']:.0f}"
    )
    log(
        f"{server.name}: the machine's cores over the run: server "
        f"{row['server_cpu_percent']:.0f} %, load tool {row['load_tool_cpu_percent']:.0f} %, "
        f"other {row['machine_other_cpu_percent']:.0f} %, idle {row['machine_idle_percent']:.0f} % "
        f"(+ {row['machine_iowait_percent']:.0f} % waiting for the disk), taken by the "
        f"hypervisor {row['machine_steal_percent']:.0f} %"
    )
    waits = row["server_runqueue_wait_us_per_request_by_process"]
    log(
        f"{server.name}: µs per request waiting for a core: "
        + ", ".join(f"{name} {us:.0f}" for name, us in waits.items())
    )
    if len(connections) > 1:
        log(
            f"{server.name}: connections held halfway: "
            + ", ".join(f"{name} {count}" for name, count in connections.items())
        )
    written = row["server_disk_write_kib_per_request_by_process"]
    if written:
        log(
            f"{server.name}: KiB written to storage per request: "
            + ", ".join(f"{name} {kib:.1f}" for name, kib in written.items())
        )
    return row


# --- profile ------------------------------------------------------------------------------
def profile_execauth(
    server: Server, load: Load, env_extra: dict[str, str], stamp: str
) -> dict[str, Any]:
    """py-spy under the same wrk load, after the measured run (sampling costs CPU)."""
    py_spy = BIN / "py-spy"
    if not py_spy.exists():
        raise RuntimeError("py-spy is not installed: .venv/bin/python -m pip install py-spy")
    seconds = min(load.duration, 15)
    outputs = {
        "flamegraph": RESULTS / f"profile-{stamp}.svg",
        "speedscope": RESULTS / f"profile-{stamp}.speedscope.json",
        "raw": server.log_path.parent / f"profile-{stamp}.txt",  # scratch: summarized below
    }
    pid = str(server.process.pid)
    # The flame graph shows every thread (idle ones excluded); the summary counts only
    # samples that hold the GIL, i.e. where the one core Python can use actually goes.
    recordings = (
        ("flamegraph", ["--format", "flamegraph", "--threads", "--subprocesses"]),
        ("speedscope", ["--format", "speedscope", "--threads", "--subprocesses"]),
        ("raw", ["--format", "raw", "--threads", "--gil", "--subprocesses"]),
    )
    procs = [
        subprocess.Popen(
            [
                str(py_spy),
                "record",
                "--pid",
                pid,
                "--duration",
                str(seconds),
                "--rate",
                "200",
                *options,
                "-o",
                str(outputs[name]),
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, options in recordings
    ]
    time.sleep(1)
    log(f"profile: py-spy record {seconds}s under wrk load")
    run_wrk(server.url, "execauth.lua", load, seconds + 2, env_extra)
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"py-spy failed: {err}")
    top = summarize_collapsed(outputs["raw"].read_text())
    files = {k: str(v.relative_to(ROOT)) for k, v in outputs.items() if k != "raw"}
    return {"files": files, **top}


def summarize_collapsed(text: str, limit: int = 25) -> dict[str, Any]:
    """Self time and inclusive time per function from py-spy's collapsed stacks."""
    total = 0
    roles: dict[str, int] = {}
    self_counts: dict[str, int] = {}
    incl_counts: dict[str, int] = {}
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        # --threads puts "thread (TID): NAME" first; --subprocesses puts the process
        # before it, whose command line (python -c "…; …") may itself contain ";".
        raw = stack.split(";")
        at = next((i for i, f in enumerate(raw) if f.startswith("thread (")), -1)
        frames = [_frame_name(f) for f in raw[at + 1 :]]
        if not frames:
            continue
        role = _thread_role(raw[at] if at >= 0 else "", stack)
        roles[role] = roles.get(role, 0) + count
        self_counts[frames[-1]] = self_counts.get(frames[-1], 0) + count
        for name in set(frames):
            incl_counts[name] = incl_counts.get(name, 0) + count

    def top(counts: dict[str, int], limit: int = limit) -> list[dict[str, Any]]:
        ranked = sorted(counts.items(), key=lambda kv: kv[1], reverse=True)[:limit]
        return [{"function": k, "samples": v, "share": v / total} for k, v in ranked]

    return {
        "samples": total,
        "threads": {k: v / total for k, v in sorted(roles.items(), key=lambda kv: -kv[1])},
        "self": top(self_counts),
        "inclusive": top(incl_counts),
        "stages": stage_shares(top(incl_counts, limit=100_000)),
    }


# The request's way through execauth (and the writer thread's work), for a per-stage
# view of the profile: inclusive share of GIL-holding samples under each function.
STAGES = (
    ("read and decode the body", "decode_json_body"),
    ("authenticate (API key cache)", "ExecutionService.authenticate"),
    ("rate limit", "ExecutionService.admit"),
    ("normalize request + request_digest (JCS)", "parse_execute_request"),
    ("select the policy block", "PolicySet.select"),
    ("evaluate (CEL)", "evaluate"),
    ("build the receipt", "build_receipt"),
    ("sign (JCS + Ed25519 + SHA-256)", "sign_receipt"),
    ("await the writer's commit", "ReceiptWriter.write"),
    ("hand to the writer process (--workers)", "RemoteReceiptWriter.write"),
    ("write the decision log line", "DecisionLog.record"),
    ("send the answer (uvicorn)", "RequestResponseCycle.send"),
    ("writer: insert + commit", "ReceiptWriter._insert"),
    ("writer: sequencer (Merkle log)", "sequence_pending"),
    ("all RFC 8785 (canonical_json)", "canonical_json"),
)


def stage_shares(inclusive: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_name = {e["function"].split(" (", 1)[0]: e["share"] for e in inclusive}
    return [{"stage": label, "function": fn, "share": by_name.get(fn, 0.0)} for label, fn in STAGES]


def _thread_role(root: str, stack: str) -> str:
    """What a thread is, from its "thread (TID): NAME" frame and its stack."""
    if "execauth-writer" in root or "ReceiptWriter._run" in stack:
        return "receipt writer thread"
    if "run_writer_process" in stack:
        return "writer process: socket loop (--workers)"
    if "MainThread" in root:
        return "event loop (requests)"
    if "WorkerThread.run" in stack or "AnyIO" in root:
        return "anyio worker threads (to_thread.run_sync)"
    return "other: " + root.split(": ", 1)[-1]


def _frame_name(frame: str) -> str:
    # "function (path/to/file.py:123)" -> "function (file.py)"; thread frames stay as is.
    match = re.match(r"^(.*?) \((.*?)(?::\d+)?\)$", frame)
    if not match:
        return frame
    function, path = match.groups()
    marker = "site-packages/"
    short = path.split(marker, 1)[1] if marker in path else path.replace(str(ROOT) + "/", "")
    return f"{function} ({short})"


# --- the machine --------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    def first(cmd: list[str]) -> str | None:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        text = (out.stdout or out.stderr).strip()
        return text.splitlines()[0] if text else None

    cpu = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    commit = first(["git", "-C", str(ROOT), "rev-parse", "HEAD"])
    dirty = first(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"])
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": mem,
        "kernel": platform.release(),
        "os": first(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]),
        "python": platform.python_version(),
        "wrk": first(["wrk", "--version"]),
        "cerbos": first([str(CERBOS_BIN), "--version"]) if CERBOS_BIN.exists() else None,
        "git_commit": commit,
        "git_dirty": bool(dirty),
    }


# --- report -------------------------------------------------------------------------------
def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'target':<18} {'workers':<34} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'errors':>6} {'srv CPU':>8} {'CPU/req':>8}",
        "-" * 103,
    ]
    for r in rows:
        lines.append(
            f"{r['target']:<18} {r['workers']:<34} {r['rps']:>8,.0f} {r['p50_ms']:>7.2f} "
            f"{r['p99_ms']:>7.2f} {r['errors']:>6} {r['server_cpu_percent']:>7.0f}% "
            f"{r['server_cpu_us_per_request']:>6.0f}µs"
        )
    return "\n".join(lines)


def ratios(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    by = {r["target"]: r for r in rows}
    out = {}
    if "execauth-traced" in by and "execauth" in by:
        on, off = by["execauth-traced"], by["execauth"]
        out["execauth-traced/execauth"] = {
            "rps": on["rps"] / off["rps"],
            "p50": on["p50_ms"] / off["p50_ms"] if off["p50_ms"] else float("nan"),
            "p99": on["p99_ms"] / off["p99_ms"] if off["p99_ms"] else float("nan"),
        }
    for name in [r["target"] for r in rows if r["target"].startswith("execauth")]:
        for other in ("cerbos", "baseline"):
            if other in by:
                a, b = by[name], by[other]
                out[f"{name}/{other}"] = {
                    "rps": a["rps"] / b["rps"],
                    "p50": a["p50_ms"] / b["p50_ms"] if b["p50_ms"] else float("nan"),
                    "p99": a["p99_ms"] / b["p99_ms"] if b["p99_ms"] else float("nan"),
                }
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="execauth load benchmark (see bench/run.py)")
    parser.add_argument("--duration", type=int, default=20, help="seconds per target [20]")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up seconds per target [3]")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads [2]")
    parser.add_argument("--connections", type=int, default=32, help="wrk connections [32]")
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="server processes of execauth and the baseline [one per core]",
    )
    parser.add_argument("--postgres", action="store_true", help="also run execauth on PostgreSQL")
    parser.add_argument("--profile", action="store_true", help="py-spy execauth under load")
    parser.add_argument(
        "--micro", action="store_true", help="run the micro benchmarks (bench/micro) instead"
    )
    parser.add_argument(
        "--targets",
        default="execauth,baseline,cerbos",
        help="comma-separated subset of execauth,baseline,cerbos [all]",
    )
    parser.add_argument(
        "--scenarios",
        default="",
        help="also run scenarios (bench/scenarios.py): comma-separated of fixed-rate, one-client, "
        "retry-storm, repeats, mix, two-instances, or 'all'",
    )
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="also run execauth with OpenTelemetry traces exported over OTLP/HTTP to a local "
        "sink (target execauth-traced), to measure what tracing costs",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="EXECAUTH_NAME=VALUE",
        help="an execauth setting for every execauth target, e.g. EXECAUTH_DECISION_LOG=off",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="measure the gateway's CPU per execute in process instead (bench/in_process.py)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat the whole run N times and report the median of each run's ratios "
        "(bench/rounds.py) [1]",
    )
    parser.add_argument(
        "--capacity",
        action="store_true",
        help="measure WAL, storage and database CPU per receipt on PostgreSQL instead",
    )
    return parser


def main() -> int:
    parser = build_parser()
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds takes a number of runs, 1 or more")
    if args.rounds > 1 and (args.micro or args.in_process or args.capacity):
        parser.error("--rounds repeats the load benchmark, not --micro, --in-process or --capacity")
    if args.rounds > 1:
        from rounds import run_rounds  # bench/rounds.py, beside this file

        return run_rounds(sys.argv[1:], args.rounds)
    if args.micro:
        return run_micro()
    if args.in_process:
        from in_process import main as run_in_process  # bench/in_process.py

        return run_in_process([])
    if args.capacity:
        from capacity import run_capacity  # bench/capacity.py, beside this file

        return run_capacity(args.duration, args.warmup, args.workers, args.connections)
    for setting in args.set:
        name, sep, value = setting.partition("=")
        if not sep or not name.startswith("EXECAUTH_"):
            parser.error(f"--set takes EXECAUTH_NAME=VALUE, not {setting!r}")
        EXTRA_SETTINGS[name] = value
    targets = {t.strip() for t in args.targets.split(",") if t.strip()}
    if unknown := targets - {"execauth", "baseline", "cerbos"}:
        # execauth on PostgreSQL is --postgres with the execauth target, not a target.
        parser.error(f"--targets: unknown {', '.join(sorted(unknown))} (execauth,baseline,cerbos)")
    if shutil.which("wrk") is None and targets:
        log("wrk is not installed: apt-get install -y wrk")
        return 2

    load = Load(args.threads, args.connections, args.duration, args.warmup)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(exist_ok=True)
    workdir = BENCH / ".work" / stamp
    workdir.mkdir(parents=True)
    rows: list[dict[str, Any]] = []
    profile: dict[str, Any] | None = None
    scenario_results: list[dict[str, Any]] = []
    chosen_scenarios = {s.strip() for s in args.scenarios.split(",") if s.strip()}
    if chosen_scenarios == {"all"}:
        from scenarios import SCENARIOS  # bench/scenarios.py, beside this file

        chosen_scenarios = set(SCENARIOS)
    try:
        if "execauth" in targets:
            db = f"sqlite:///{workdir / 'execauth.db'}"
            with execauth_server(workdir, db, "execauth", args.workers) as server:
                env = {"BENCH_API_KEY": server.extra["api_key"]}
                rows.append(measure(server, "execauth.lua", load, env) | server.extra)
                if args.profile:
                    profile = profile_execauth(server, load, env, stamp)
            if args.tracing:
                traced_db = f"sqlite:///{workdir / 'execauth-traced.db'}"
                with otlp_sink() as sink:
                    otel = {
                        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink['port']}",
                        "OTEL_SERVICE_NAME": "execauth-bench",
                    }
                    with execauth_server(
                        workdir, traced_db, "execauth-traced", args.workers, otel=otel
                    ) as server:
                        env = {"BENCH_API_KEY": server.extra["api_key"]}
                        row = measure(server, "execauth.lua", load, env) | server.extra
                    # Read after the server stopped: its last batches are flushed by then.
                    rows.append(row | {"tracing": "otlp/http", "otlp_requests": sink["requests"],
                                       "otlp_bytes": sink["bytes"]})  # fmt: skip
            if args.postgres:
                admin_url = os.environ.get("EXECAUTH_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
                with (
                    fresh_postgres_database(admin_url) as pg_url,
                    execauth_server(workdir, pg_url, "execauth-postgres", args.workers) as server,
                ):
                    env = {"BENCH_API_KEY": server.extra["api_key"]}
                    rows.append(measure(server, "execauth.lua", load, env) | server.extra)
        if "baseline" in targets:
            with baseline_server(workdir, args.workers) as server:
                rows.append(measure(server, "baseline.lua", load, {}))
        if "cerbos" in targets:
            with cerbos_server(workdir) as server:
                row = measure(server, "cerbos.lua", load, {})
            rows.append(row | {"audit_bytes": server.extra.get("audit_bytes")})
        if chosen_scenarios:
            from scenarios import run_scenarios  # bench/scenarios.py, beside this file

            scenario_results = run_scenarios(
                chosen_scenarios, workdir=workdir, load=load, workers=args.workers, peak_rows=rows
            )
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    for row in rows:
        row.pop("api_key", None)
    report: dict[str, Any] = {
        "timestamp": stamp,
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "load": {
            "tool": "wrk",
            "threads": load.threads,
            "connections": load.connections,
            "duration_s": load.duration,
            "warmup_s": load.warmup,
        },
        "settings": EXTRA_SETTINGS,
        "machine": machine(),
        "results": rows,
        "ratios": ratios(rows),
        "profile": profile,
        "scenarios": scenario_results,
    }
    if rows:
        print()
        print(table(rows))
        for name, r in report["ratios"].items():
            print(f"{name:<26} req/s x{r['rps']:.2f}   p50 x{r['p50']:.2f}   p99 x{r['p99']:.2f}")
        m = report["machine"]
        print(
            f"\nmachine: {m['cpu']}, {m['cores']} cores, {m['memory']}, Linux {m['kernel']}, "
            f"Python {m['python']}, {m['wrk']}, cerbos {m['cerbos']}, commit {m['git_commit']}"
            f"{' (dirty)' if m['git_dirty'] else ''}"
        )
        print(
            f"load: wrk -t{load.threads} -c{load.connections} -d{load.duration}s "
            f"(after a {load.warmup}s warm-up), same for every target"
        )
    if scenario_results:
        from scenarios import scenario_table

        print(scenario_table(scenario_results, rows))
    if profile:
        print(f"\npy-spy (--gil): {profile['samples']} samples holding the GIL, by thread:")
        for role, share in profile["threads"].items():
            print(f"  {share:6.1%}  {role}")
        print("by stage (inclusive):")
        for entry in profile["stages"]:
            print(f"  {entry['share']:6.1%}  {entry['stage']}")
        print("top functions by self time:")
        for entry in profile["self"][:15]:
            print(f"  {entry['share']:6.1%}  {entry['function']}")
    if rows or profile or scenario_results:
        path = RESULTS / f"{stamp}.json"
        path.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwritten: {path.relative_to(ROOT)}")
    return 0


def run_micro() -> int:
    """pytest-benchmark over bench/micro; the JSON goes next to the load results."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(exist_ok=True)
    output = RESULTS / f"micro-{stamp}.json"
    code = subprocess.call(
        [
            str(BIN / "pytest"),
            str(BENCH / "micro"),
            "--benchmark-only",
            "-p",
            "no:cacheprovider",
            f"--benchmark-json={output}",
            "--benchmark-columns=min,median,mean,ops,rounds",
            "--benchmark-sort=name",
        ],
        cwd=ROOT,
    )
    if output.exists():
        # Keep the statistics, drop every round's raw timing (megabytes of it).
        report = json.loads(output.read_text())
        for bench in report["benchmarks"]:
            bench["stats"].pop("data", None)
        output.write_text(json.dumps(report, indent=2) + "\n")
    return code


if __name__ == "__main__":
    # bench/scenarios.py and bench/capacity.py import this file as ``run``: let them share
    # this module (and its --set settings) rather than load a second copy.
    sys.modules.setdefault("run", sys.modules[__name__])
    sys.exit(main())
