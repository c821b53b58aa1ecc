"""The scenarios users ask about beyond the peak (``bench/run.py --scenarios``).

- **fixed-rate**: the latency curve at a fixed offered rate, 25, 50 and 75 % of
  Cerbos's peak measured in the same run, for execauth and Cerbos alike, with
  ``hey -c 16 -q RATE/16`` (Debian's hey: each of its 16 workers sends at most RATE/16
  requests per second). hey sends the same body every time, so execauth's requests
  carry no Idempotency-Key: each is still a new decision, evaluated, signed, stored.
- **retry-storm**: two wrk clients (``-t1 -c16`` each) send the same sequence of
  idempotency keys with the same requests at the same time, as two retrying copies of a
  caller would: for every key one of them creates the decision and the other repeats
  it. Compared with the unique-key peak of the same run (``-t2 -c32``), and with the
  same two clients sending unique keys right after (the load tool's share then equal).
- **repeats**: every request repeats one of 1,000 idempotency keys that the warm-up
  stored (same request each time), ``-t2 -c32`` like the peak: what a repeat costs,
  against the peak's new decisions.
- **mix**: 16 PERMIT, 3 DENY (rule ``wrong-branch``) and 1 SILENCE (the block's
  required ``context.branch`` missing) in every 20 requests, unique keys.
- **one-client**: one client that sends its next request when the answer comes
  (``hey -c 1``), for execauth and Cerbos: the latency of a decision with no queue in
  front of it, what a CI job or an agent asking one thing at a time sees.
- **two-instances**: two ``execauth serve`` instances on one PostgreSQL database,
  ``--workers`` split between them, the same organization and key, one wrk client
  (``-t1 -c16``) on each; the sum is the figure.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
from run import (  # type: ignore[import-not-found]
    DEFAULT_POSTGRES,
    JSON_MARK,
    WRK_DIR,
    Load,
    Server,
    cerbos_server,
    cpu_seconds,
    execauth_server,
    fresh_postgres_database,
    log,
    measure,
    wrk_body_sample,
)

SCENARIOS = ("fixed-rate", "one-client", "retry-storm", "repeats", "mix", "two-instances")
FIXED_RATE_SHARES = (0.25, 0.50, 0.75)
HEY_WORKERS = 16
CERBOS_BODY = {
    "requestId": "bench",
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


def run_scenarios(
    chosen: set[str],
    *,
    workdir: Path,
    load: Load,
    workers: int,
    peak_rows: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Run the chosen scenarios; one result row each (a list of points for fixed-rate)."""
    results: list[dict[str, Any]] = []
    unknown = chosen - set(SCENARIOS)
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    sqlite_needed = chosen & {"retry-storm", "repeats", "mix", "fixed-rate", "one-client"}
    if sqlite_needed:
        db = f"sqlite:///{workdir / 'scenarios.db'}"
        with execauth_server(workdir, db, "execauth-scenarios", workers) as server:
            env = {"BENCH_API_KEY": server.extra["api_key"]}
            if "retry-storm" in chosen:
                results.append(retry_storm(server, load, env))
            if "repeats" in chosen:
                # The warm-up stores the 1,000 keys; the measured run only repeats them.
                repeat_env = env | {"BENCH_KEY_SET": secrets.token_hex(4)}
                row = measure(server, "execauth-repeat.lua", load, repeat_env)
                check_repeats(server, repeat_env["BENCH_KEY_SET"])
                results.append({"scenario": "repeats", **_summary(row)})
            if "mix" in chosen:
                check_mix(server)
                row = measure(server, "execauth-mix.lua", load, env)
                results.append({"scenario": "mix", **_summary(row)})
            if "fixed-rate" in chosen:
                results.append(fixed_rate(server, workdir, load, peak_rows))
            if "one-client" in chosen:
                results.append(one_client(server, workdir, load))
    if "two-instances" in chosen:
        results.append(two_instances(workdir, load, workers))
    return results


# --- retry storm --------------------------------------------------------------------------
def retry_storm(server: Server, load: Load, env: dict[str, str]) -> dict[str, Any]:
    """The storm, and the same two clients with unique keys: the load tool's own share
    (two wrk processes, not one with two threads) is then the same on both sides."""
    half = max(load.connections // 2, 1)
    targets = [(server.url, "execauth.lua", env)] * 2
    log(f"retry-storm: warm-up {load.warmup}s (unique keys, not counted)")
    concurrent_wrk(targets, half, load.warmup, None, server)  # a fresh server, like the peak's
    log(f"retry-storm: two clients, the same keys, {load.duration}s")
    run_id = secrets.token_hex(4)  # the same for both clients: the same key sequence
    storm = _combined(concurrent_wrk(targets, half, load.duration, run_id, server))
    log(f"retry-storm: the same two clients, unique keys, {load.duration}s")
    unique = _combined(concurrent_wrk(targets, half, load.duration, None, server))
    return {"scenario": "retry-storm", **storm, "unique_keys_same_clients": unique}


# --- repeats ------------------------------------------------------------------------------
def check_repeats(server: Server, key_set: str) -> None:
    """The repeats scenario's requests really were repeats: a few of its keys, sent once
    more with execauth-repeat.lua's body, come back as idempotent repeats."""
    request = json.loads(wrk_body_sample())
    request["context"]["pipeline"] = "gh-actions/1"
    for n in (0, 1, 999):
        headers = {
            "Authorization": f"Bearer {server.extra['api_key']}",
            "Idempotency-Key": f"repeat-{key_set}-{n}",
        }
        answer = httpx.post(server.url + "/v1/execute", json=request, headers=headers, timeout=10)
        if answer.headers.get("idempotent-replayed") != "true":
            raise RuntimeError(f"repeats: key {n} was not a repeat: {answer.status_code}")


# --- mix ----------------------------------------------------------------------------------
def check_mix(server: Server) -> None:
    """The mix's three kinds of request really get the three decisions."""
    sample = wrk_body_sample()
    headers = {"Authorization": f"Bearer {server.extra['api_key']}"}
    expected = {"main": "PERMIT", "feature/x": "DENY", None: "SILENCE"}
    for branch, decision in expected.items():
        request = json.loads(sample)
        if branch is None:
            del request["context"]["branch"]
        else:
            request["context"]["branch"] = branch
        answer = httpx.post(server.url + "/v1/execute", json=request, headers=headers, timeout=10)
        got = answer.json().get("decision")
        if got != decision:
            raise RuntimeError(f"mix: branch {branch!r} should be {decision}, got {answer.text}")


# --- fixed rate ---------------------------------------------------------------------------
def fixed_rate(
    server: Server, workdir: Path, load: Load, peak_rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """hey at 25/50/75 % of Cerbos's peak from this run, against execauth and Cerbos."""
    if shutil.which("hey") is None:
        raise RuntimeError("hey is not installed: apt-get install -y hey")
    cerbos_peak = next((r["rps"] for r in peak_rows if r["target"] == "cerbos"), None)
    if cerbos_peak is None:
        raise RuntimeError("fixed-rate needs Cerbos's peak from the same run (--targets cerbos)")
    points: list[dict[str, Any]] = []
    body_path = workdir / "execute.json"
    body_path.write_text(wrk_body_sample())
    cerbos_path = workdir / "cerbos.json"
    cerbos_path.write_text(json.dumps(CERBOS_BODY))
    seconds = max(load.duration // 2, 5)
    with cerbos_server(workdir) as cerbos:
        for share in FIXED_RATE_SHARES:
            rate = round(cerbos_peak * share)
            for name, url, path, headers in (
                (
                    "execauth",
                    server.url + "/v1/execute",
                    body_path,
                    [f"Authorization: Bearer {server.extra['api_key']}"],
                ),
                ("cerbos", cerbos.url + "/api/check/resources", cerbos_path, []),
            ):
                target = server if name == "execauth" else cerbos
                point = run_hey(target, url, path, headers, rate, seconds)
                points.append({"target": name, "share_of_cerbos_peak": share, **point})
                log(
                    f"fixed-rate {name} {rate:,} req/s offered: {point['rps']:,.0f} served, "
                    f"p50 {point['p50_ms']:.2f} ms, p99 {point['p99_ms']:.2f} ms, "
                    f"errors {point['errors']}"
                )
    return {"scenario": "fixed-rate", "cerbos_peak_rps": cerbos_peak, "points": points}


def one_client(server: Server, workdir: Path, load: Load) -> dict[str, Any]:
    """``hey -c 1``: each request sent when the previous answer came, execauth and Cerbos."""
    if shutil.which("hey") is None:
        raise RuntimeError("hey is not installed: apt-get install -y hey")
    body_path = workdir / "execute.json"
    body_path.write_text(wrk_body_sample())
    cerbos_path = workdir / "cerbos.json"
    cerbos_path.write_text(json.dumps(CERBOS_BODY))
    seconds = max(load.duration // 2, 5)
    points: list[dict[str, Any]] = []
    headers = [f"Authorization: Bearer {server.extra['api_key']}"]
    point = run_hey(server, server.url + "/v1/execute", body_path, headers, None, seconds, 1)
    points.append({"target": "execauth", **point})
    with cerbos_server(workdir) as cerbos:
        url = cerbos.url + "/api/check/resources"
        points.append(
            {"target": "cerbos", **run_hey(cerbos, url, cerbos_path, [], None, seconds, 1)}
        )
    for p in points:
        log(
            f"one client, {p['target']}: {p['rps']:,.0f} req/s, p50 {p['p50_ms']:.2f} ms, "
            f"p90 {p['p90_ms']:.2f} ms, p99 {p['p99_ms']:.2f} ms, errors {p['errors']}"
        )
    return {"scenario": "one-client", "points": points}


def run_hey(
    server: Server,
    url: str,
    body: Path,
    headers: list[str],
    rate: int | None,
    seconds: int,
    workers: int = HEY_WORKERS,
) -> dict[str, Any]:
    """hey for ``seconds``: ``workers`` clients offering ``rate`` requests/s in all, or,
    with ``rate`` None, each sending its next request when the answer comes."""
    argv = ["hey", "-z", f"{seconds}s", "-c", str(workers)]
    if rate is not None:
        argv += ["-q", f"{max(rate / workers, 0.1):.2f}"]
    argv += ["-m", "POST", "-T", "application/json", "-D", str(body), "-t", "10", "-o", "csv"]
    for header in headers:
        argv += ["-H", header]
    argv.append(url)
    cpu_before = cpu_seconds(server.process.pid)
    started = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    elapsed = time.monotonic() - started
    cpu_used = cpu_seconds(server.process.pid) - cpu_before
    if result.returncode != 0:
        raise RuntimeError(f"hey failed ({result.returncode}): {result.stderr}")
    latencies: list[float] = []
    errors = 0
    for line in result.stdout.splitlines()[
        1:
    ]:  # response-time,DNS+dialup,DNS,...,status-code,offset
        fields = line.split(",")
        if len(fields) < 7:
            continue
        latencies.append(float(fields[0]) * 1000)
        if not fields[6].startswith("2"):
            errors += 1
    if not latencies:
        raise RuntimeError(f"hey recorded no responses:\n{result.stderr}")
    latencies.sort()
    return {
        "offered_rps": rate,  # None: as fast as the answers come
        "rps": len(latencies) / elapsed,
        "requests": len(latencies),
        "p50_ms": _percentile(latencies, 50),
        "p90_ms": _percentile(latencies, 90),
        "p99_ms": _percentile(latencies, 99),
        "max_ms": latencies[-1],
        "mean_ms": statistics.fmean(latencies),
        "errors": errors,
        "server_cpu_us_per_request": 1e6 * cpu_used / len(latencies),
    }


def _percentile(ordered: list[float], pct: float) -> float:
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))
    return ordered[index]


# --- two instances ------------------------------------------------------------------------
def two_instances(workdir: Path, load: Load, workers: int) -> dict[str, Any]:
    admin_url = os.environ.get("EXECAUTH_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
    each = max(workers // 2, 1)
    log(f"two-instances: two execauth serve --workers {each} on one PostgreSQL database")
    with (
        fresh_postgres_database(admin_url) as pg_url,
        execauth_server(workdir, pg_url, "execauth-pg-a", each) as first,
        execauth_server(workdir, pg_url, "execauth-pg-b", each, joining=first) as second,
    ):
        env = {"BENCH_API_KEY": first.extra["api_key"]}
        half = max(load.connections // 2, 1)
        targets = [(first.url, "execauth.lua", env), (second.url, "execauth.lua", env)]
        if load.warmup:
            concurrent_wrk(targets, half, load.warmup, secrets.token_hex(4), None)
        clients = concurrent_wrk(targets, half, load.duration, None, None, (first, second))
    return {"scenario": "two-instances", "workers_each": each, **_combined(clients)}


# --- concurrent wrk clients ---------------------------------------------------------------
def concurrent_wrk(
    targets: list[tuple[str, str, dict[str, str]]],
    connections: int,
    seconds: int,
    run_id: str | None,
    server: Server | None,
    servers: tuple[Server, ...] = (),
) -> list[dict[str, Any]]:
    """One ``wrk -t1`` per target at once; ``run_id`` shared (same keys) or None (distinct).

    CPU is read from ``server`` (one server for all clients) or from each of ``servers``.
    """
    watched = [server] if server else list(servers)
    cpu_before = sum(cpu_seconds(s.process.pid) for s in watched)
    processes = []
    for url, script, env_extra in targets:
        argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s"]
        argv += ["--latency", "-s", str(WRK_DIR / script), url]
        env = os.environ | env_extra | {"BENCH_WRK_DIR": str(WRK_DIR)}
        env["BENCH_RUN_ID"] = run_id or secrets.token_hex(4)
        processes.append(
            subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        )
    outputs = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=seconds + 60)
        if process.returncode != 0:
            raise RuntimeError(f"wrk failed ({process.returncode}): {stderr.decode()}")
        outputs.append(stdout.decode())
    cpu_used = sum(cpu_seconds(s.process.pid) for s in watched) - cpu_before
    clients = []
    for text in outputs:
        line = next((x for x in text.splitlines() if x.startswith(JSON_MARK)), None)
        if line is None:
            raise RuntimeError(f"wrk printed no {JSON_MARK.strip()} line:\n{text}")
        raw = json.loads(line[len(JSON_MARK) :])
        errors = raw["errors"]
        clients.append(
            {
                "requests": raw["requests"],
                "rps": raw["requests"] / (raw["duration_us"] / 1e6),
                "p50_ms": raw["latency_us"]["p50"] / 1000,
                "p99_ms": raw["latency_us"]["p99"] / 1000,
                "max_ms": raw["latency_us"]["max"] / 1000,
                "non_2xx": errors["status"],
                "timeouts": errors["timeout"],
                "socket_errors": errors["connect"] + errors["read"] + errors["write"],
            }
        )
    total = sum(c["requests"] for c in clients)
    for client in clients:
        client["server_cpu_us_per_request_all"] = 1e6 * cpu_used / max(total, 1)
    return clients


def _combined(clients: list[dict[str, Any]]) -> dict[str, Any]:
    combined = {
        "rps": sum(c["rps"] for c in clients),
        "requests": sum(c["requests"] for c in clients),
        "p99_ms_worst": max(c["p99_ms"] for c in clients),
        "timeouts": sum(c["timeouts"] for c in clients),
        "errors": sum(c["non_2xx"] + c["socket_errors"] + c["timeouts"] for c in clients),
        "server_cpu_us_per_request": clients[0]["server_cpu_us_per_request_all"],
        "clients": clients,
    }
    log(
        f"{combined['rps']:,.0f} req/s in all ("
        + ", ".join(f"{c['rps']:,.0f} req/s p99 {c['p99_ms']:.1f} ms" for c in clients)
        + f"), timeouts {combined['timeouts']}, errors {combined['errors']}"
    )
    return combined


def _summary(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("rps", "requests", "p50_ms", "p99_ms", "errors", "server_cpu_us_per_request")
    return {k: row[k] for k in keys}


def scenario_table(results: list[dict[str, Any]], peak_rows: list[dict[str, Any]]) -> str:
    peak = next((r for r in peak_rows if r["target"] == "execauth"), None)
    lines = ["", "scenario                      req/s   p50 ms   p99 ms  errors  CPU/req"]
    if peak:
        lines.append(
            f"{'unique keys (peak, above)':<26} {peak['rps']:>8,.0f} {peak['p50_ms']:>8.2f} "
            f"{peak['p99_ms']:>8.2f} {peak['errors']:>7} "
            f"{peak['server_cpu_us_per_request']:>6.0f}µs"
        )
    for r in results:
        name = r["scenario"]
        if name in ("fixed-rate", "one-client"):
            for p in r["points"]:
                label = (
                    f"fixed {p['target']} {p['offered_rps']:,}/s"
                    if name == "fixed-rate"
                    else f"one client, {p['target']}"
                )
                lines.append(
                    f"{label:<26} {p['rps']:>8,.0f} {p['p50_ms']:>8.2f} {p['p99_ms']:>8.2f} "
                    f"{p['errors']:>7} {p['server_cpu_us_per_request']:>6.0f}µs"
                )
            continue
        rows = [(name, r)]
        if "unique_keys_same_clients" in r:
            rows.append(("  unique keys, 2 clients", r["unique_keys_same_clients"]))
        for label, row in rows:
            p50 = f"{row['p50_ms']:>8.2f}" if "p50_ms" in row else f"{'-':>8}"
            p99 = row.get("p99_ms", row.get("p99_ms_worst"))
            lines.append(
                f"{label:<26} {row['rps']:>8,.0f} {p50} {p99:>8.2f} {row['errors']:>7} "
                f"{row['server_cpu_us_per_request']:>6.0f}µs"
            )
    return "\n".join(lines)
