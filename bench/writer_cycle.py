"""The writer process's own CPU per receipt, driven by gateway clients without HTTP.

    .venv/bin/python bench/writer_cycle.py [--records 20000] [--rounds 3] [--in-flight 16]
    PYTHONPATH=/path/to/other/src .venv/bin/python bench/writer_cycle.py   # another version

The writer process of ``serve --workers 2`` (``serving/writer_process.py``: the
group-commit writer on its loop, with its log keeper process on a SQLite file) is
started on a fresh database as ``serve`` starts it. Two client processes stand in for
the two gateways: each holds ``--in-flight`` writes open at once through the gateway's
own client (``RemoteReceiptWriter``), records built before the clock starts, each with
its own idempotency key and the unmetered plan's quota, as the load benchmark's
executes are. What is printed per round is the CPU time (user and system, from
``/proc``) of the writer process and of its log keeper per receipt, and the receipts a
second the pair committed.

Under ``make bench`` each request waits for the writer's cycle, which shares the two
cores with the gateways (docs/performance.md, "What bounds it now"); this measures that
cycle alone, so that a change to it is judged in minutes and in CPU, not in a load
benchmark's requests a second, which move by ten percent between runs. The clients'
own CPU competes for the same cores, as the gateways' does: the wall-clock rate is
reported but is not the figure to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import multiprocessing
import os
import secrets
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

CLIENTS = 2  # as serve --workers 2 on this 2-core machine
ORG_ID = "org_01benchwritercycle0000000"


def _environment(workdir: Path) -> dict[str, str]:
    return {
        "EXECAUTH_DATABASE_URL": f"sqlite:///{workdir}/execauth.db",
        "EXECAUTH_SECRET_KEY": "bench-" + "s" * 40,
        "EXECAUTH_ISSUER": "https://execauth.bench.invalid",
        "EXECAUTH_STREAMING_ENABLED": "false",
        "EXECAUTH_LOG_LEVEL": "WARNING",
    }


def _provision() -> None:
    """The schema, a signing key and the organization the records belong to."""
    from execauth.config import Settings
    from execauth.serving.runtime import prepare
    from execauth.store.control import ControlStore
    from execauth.store.database import make_engine
    from execauth.tenancy.audit import AuditEvent
    from execauth.tenancy.orgs import Org

    settings = Settings()
    prepare(settings)
    engine = make_engine(settings.database_url)
    now = datetime.now(UTC)
    org = Org(ORG_ID, "Bench", "bench", "a", now)
    ControlStore(engine).create_org(org, AuditEvent(ORG_ID, now, "bench", "org.created", ORG_ID))
    engine.dispose()


def _records(count: int) -> list[Any]:
    """The micro benchmark's records (``bench/micro/test_bench_writer.py``: a ~1 KB
    receipt, the benchmark's request), each with a random idempotency key, as a client's
    own keys land on random pages of their index, and the leaf hash a gateway computes."""
    from micro.test_bench_writer import record

    return [
        dataclasses.replace(
            record(ORG_ID),
            idempotency_key=secrets.token_urlsafe(16),
            leaf_hash=secrets.token_bytes(32),
        )
        for _ in range(count)
    ]


def _client(socket_path: str, count: int, in_flight: int, start: Barrier) -> None:
    """One stand-in gateway: ``count`` writes, ``in_flight`` at a time."""
    import uvloop

    from execauth.serving.remote_writer import RemoteReceiptWriter
    from execauth.tenancy.quota import QuotaCheck

    records = _records(count)
    now = datetime.now(UTC)
    quota = QuotaCheck("bench", f"{now:%Y-%m}", None, datetime(now.year + 1, 1, 1, tzinfo=UTC))
    writer = RemoteReceiptWriter(socket_path, timeout_seconds=30.0)

    async def run() -> None:
        assert await writer.ready()
        start.wait()
        queue = iter(records)

        async def worker() -> None:
            for record in queue:
                assert await writer.write(record, quota) is None  # stored, not a repeat

        await asyncio.gather(*(worker() for _ in range(in_flight)))
        writer.stop()

    uvloop.run(run())


def _cpu_seconds(pid: int) -> float:
    # The fields after the command's closing parenthesis (a title may hold spaces).
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


def _round(socket_path: str, writer_pid: int, records: int, in_flight: int) -> dict[str, float]:
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(CLIENTS + 1)
    clients = [
        context.Process(target=_client, args=(socket_path, records // CLIENTS, in_flight, start))
        for _ in range(CLIENTS)
    ]
    for process in clients:
        process.start()
    (keeper_pid,) = _children(writer_pid)
    start.wait()
    began = time.perf_counter()
    writer_before, keeper_before = _cpu_seconds(writer_pid), _cpu_seconds(keeper_pid)
    for process in clients:
        process.join()
        assert process.exitcode == 0, f"a client failed ({process.exitcode})"
    elapsed = time.perf_counter() - began
    writer_cpu = _cpu_seconds(writer_pid) - writer_before
    keeper_cpu = _cpu_seconds(keeper_pid) - keeper_before
    done = records // CLIENTS * CLIENTS
    return {
        "writer_cpu_us_per_receipt": 1e6 * writer_cpu / done,
        "log_keeper_cpu_us_per_receipt": 1e6 * keeper_cpu / done,
        "receipts_per_second": done / elapsed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000, help="receipts a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=16, help="open writes per client")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="execauth-writer-cycle-") as directory:
        workdir = Path(directory)
        os.environ.update(_environment(workdir))
        _provision()
        from execauth.serving.writer_process import WriterProcess

        socket_path = str(workdir / "writer.sock")
        writer = WriterProcess(socket_path)
        writer.start()
        try:
            (writer_pid,) = [p.pid for p in multiprocessing.active_children() if p.pid]
            rounds = [
                _round(socket_path, writer_pid, args.records, args.in_flight)
                for _ in range(args.rounds)
            ]
        finally:
            writer.stop()
    for n, result in enumerate(rounds, 1):
        print(
            f"round {n}: writer {result['writer_cpu_us_per_receipt']:.1f} µs CPU a receipt, "
            f"log keeper {result['log_keeper_cpu_us_per_receipt']:.1f}, "
            f"{result['receipts_per_second']:,.0f} receipts/s",
            file=sys.stderr,
        )
    summary = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]} | {
        "rounds": rounds,
        "records": args.records,
        "in_flight": args.in_flight,
    }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
