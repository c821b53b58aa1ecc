"""The gateway's own CPU per execute, driven in process: no HTTP server, no writer hop.

    .venv/bin/python bench/in_process.py [--requests 20000] [--rounds 3]
    make bench ARGS=--in-process

The ASGI app of one gateway worker (``create_app``, as ``serve --workers N`` builds it:
multiprocess metrics, the decision log written as JSON lines to a file) is called
directly with the request ``bench/wrk/execauth.lua`` sends, each with its own
Idempotency-Key, and a receipt sink that answers at once: what is measured is the
work of authenticating, deciding, signing and answering, not the commit. The figure
is the process's CPU time (``time.process_time``) per request, so it does not depend
on what else the machine runs, and it moves by a few percent between runs where a
load benchmark moves by ten: this is how a change to the request path is judged
before the load benchmark confirms it (docs/performance.md).

Two figures per round:
- **hot**: requests back to back, the code and data of the path in the CPU's caches,
  the best case;
- **cold**: the caches emptied before each request (8 MiB written), as when a gateway
  shares its core with the load generator, the writer process and its sibling; under
  ``make bench`` a gateway spends about what this figure says (docs/performance.md).
  The eviction's own time is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
EVICT_BYTES = 8 * 1024 * 1024  # more than this machine's L2 per core (4 MiB)

# The body bench/wrk/execauth.lua sends.
BODY = (
    b'{"surface":"deploy.production","action":"deploy","actor":"release-bot",'
    b'"context":{"branch":"main","ticket":"CHG-4821"},'
    b'"payload":{"service":"checkout-api","image":"registry.example/checkout-api@sha256:'
    b'9f2c1e7ab04d33c5e8f6a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6",'
    b'"replicas":6,"region":"eu-west-1","commit":"4f9d2a1c","canary":true}}'
)
ADMIN_TOKEN = "service_admin_" + "b" * 32
ISSUER = "http://127.0.0.1:8080"


class AnswersAtOnce:
    """A receipt sink (``serving/write_path.ReceiptSink``) that stores nothing: the
    benchmark measures the gateway, whose wait for the commit costs it no CPU."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    async def ready(self) -> bool:
        return True

    async def write(self, record: object, quota: object = None) -> None:
        return None

    async def count_repeat(self, repeat: object) -> None:
        return None


def execute_scope(secret: str, idempotency_key: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/execute",
        "raw_path": b"/v1/execute",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8080"),
            (b"authorization", f"Bearer {secret}".encode()),
            (b"content-type", b"application/json"),
            (b"idempotency-key", idempotency_key.encode()),
            (b"content-length", str(len(BODY)).encode()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8080),
        "state": {},
    }


@contextlib.asynccontextmanager
async def provisioned_app(
    workdir: Path, *, workers: int, decision_log: str
) -> AsyncIterator[tuple[Any, Any, str]]:
    """A gateway's ASGI app as ``serve --workers N`` builds it, its lifespan running, with
    an organization on the ``bench`` plan, an execute key and ``bench/policy.yaml``
    published through the console API: (app, runtime, the key's secret). With
    ``workers=1`` the app commits through the in-process writer, as ``serve --workers 1``
    does; bench/path_length.py follows one execute through it."""
    metrics_dir = workdir / "metrics"
    metrics_dir.mkdir()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)  # as serve --workers N
    # Imported here: PROMETHEUS_MULTIPROC_DIR must be set before prometheus_client loads.
    import httpx

    from execauth.api.app import create_app
    from execauth.config import PlanSettings, Settings
    from execauth.observability.logs import setup_logging
    from execauth.serving.runtime import bootstrap

    plans = Settings().plans
    plans["bench"] = PlanSettings(unmetered=True, requests_per_minute=100_000_000)
    settings = Settings(
        database_url=f"sqlite:///{workdir}/execauth.db",
        secret_key="bench-" + "s" * 40,
        admin_token=ADMIN_TOKEN,
        issuer=ISSUER,
        secret_key_file=workdir / "unused.key",
        plans=plans,
        workers=workers,  # as a gateway of serve --workers N (the rate limiter's share)
        decision_log=str(workdir / "decisions.log") if decision_log == "file" else decision_log,
        sequencer_interval_seconds=3600,
        streaming_enabled=False,
    )
    runtime = bootstrap(settings)
    setup_logging(settings)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the setup's requests
    app = create_app(runtime)
    async with app.router.lifespan_context(app):
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=ISSUER) as client:
            org = await client.post("/console/v1/orgs", json={"name": "b", "plan": "bench"},
                                    headers=admin)  # fmt: skip
            org_id = org.raise_for_status().json()["org_id"]
            key = await client.post(f"/console/v1/orgs/{org_id}/keys", json={"name": "k"},
                                    headers=admin)  # fmt: skip
            policy = (BENCH / "policy.yaml").read_bytes()
            published = await client.put(f"/console/v1/orgs/{org_id}/policies/bench",
                                         content=policy, headers=admin)  # fmt: skip
            published.raise_for_status()
        yield app, runtime, key.raise_for_status().json()["api_key"]


async def _measure(requests: int, rounds: int, workdir: Path, decision_log: str) -> dict[str, Any]:
    from execauth.serving.runtime import freeze_startup_objects
    from execauth.serving.write_path import WritePath

    async with provisioned_app(workdir, workers=2, decision_log=decision_log) as (
        app,
        runtime,
        secret,
    ):
        sink = runtime.write_path
        runtime.write_path = WritePath(AnswersAtOnce(), None, sink.sequencer, None)
        freeze_startup_objects()  # as a worker does once started

        sent: list[MutableMapping[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": BODY, "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        counter = 0

        async def one() -> None:
            nonlocal counter
            counter += 1
            sent.clear()
            await app(execute_scope(secret, f"in-process-{counter}"), receive, send)
            # One turn of the event loop per request, as a server's loop turns for the
            # socket's I/O: what the app scheduled for "soon" runs, and is counted.
            await asyncio.sleep(0)
            if sent[0]["status"] != 200 or b'"decision":"PERMIT"' not in sent[1]["body"]:
                raise RuntimeError(f"not a PERMIT: {sent}")

        evict = bytearray(EVICT_BYTES)
        zeros = bytes(EVICT_BYTES // 64)
        for _ in range(2000):  # warm-up: caches of the app, the interpreter's specializations
            await one()
        hot: list[float] = []
        cold: list[float] = []
        for _ in range(rounds):
            started = time.process_time()
            for _ in range(requests):
                await one()
            hot.append((time.process_time() - started) / requests * 1e6)
            evicting = 0.0
            started = time.process_time()
            for _ in range(requests):
                before = time.process_time()
                evict[::64] = zeros  # one write per cache line
                evicting += time.process_time() - before
                await one()
            cold.append((time.process_time() - started - evicting) / requests * 1e6)
        runtime.write_path = sink
    return {
        "requests_per_round": requests,
        "hot_us_per_execute": [round(v, 1) for v in hot],
        "cold_us_per_execute": [round(v, 1) for v in cold],
        "hot_median_us": round(statistics.median(hot), 1),
        "cold_median_us": round(statistics.median(cold), 1),
        # On a noisy VM the least of many short rounds is the steadier figure: another
        # process's work only ever adds time (docs/performance.md, "The per-decision round").
        "hot_least_us": round(min(hot), 1),
        "cold_least_us": round(min(cold), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000, help="per round [10000]")
    parser.add_argument("--rounds", type=int, default=3, help="hot and cold rounds [3]")
    parser.add_argument(
        "--decision-log",
        default="file",
        choices=["file", "stderr", "off"],
        help="EXECAUTH_DECISION_LOG: a file in the scratch directory, or off [file]",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="execauth-in-process-") as scratch:
        import uvloop

        result = uvloop.run(_measure(args.requests, args.rounds, Path(scratch), args.decision_log))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    result = {
        "timestamp": stamp,
        "command": " ".join(sys.argv),
        "decision_log": args.decision_log,
        **result,
    }
    RESULTS.mkdir(exist_ok=True)
    output = RESULTS / f"in-process-{stamp}.json"
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"execute, in process: hot {result['hot_median_us']} µs, "
        f"cold {result['cold_median_us']} µs per request (medians; least of a round: "
        f"hot {result['hot_least_us']}, cold {result['cold_least_us']}) "
        f"(rounds: hot {result['hot_us_per_execute']}, cold {result['cold_us_per_execute']})"
    )
    print(f"written: {output.relative_to(ROOT)}")
    return 0


def checkout_source_first() -> None:
    """Import this checkout's source, unless PYTHONPATH names the source to measure: the
    alternated pairs of docs/performance.md run a copy of the code before a change that
    way, and a checkout put ahead of it would be measured against itself."""
    if not os.environ.get("PYTHONPATH"):
        sys.path.insert(0, str(ROOT / "src"))


if __name__ == "__main__":
    checkout_source_first()
    raise SystemExit(main())
