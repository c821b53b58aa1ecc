"""What one receipt costs PostgreSQL: WAL bytes, stored bytes, database CPU.

    .venv/bin/python bench/run.py --capacity [--duration 20] [--workers 2]

Runs the real ``execauth serve`` on a database created for the run, warms it up, then
drives the same wrk load as ``make bench`` (unique idempotency keys, every request a
PERMIT) and reads, before and after the measured window:

- **WAL bytes of this database only.** ``pg_current_wal_lsn()`` is cluster-wide, and
  the server may be shared (CI runs other tests against it), so the WAL range is read
  back with ``pg_waldump`` and a record counts when a block it touches belongs to this
  database's OID, or when its transaction id is one of those (commit records name no
  relation). Full-page images are included: they are what a real server writes after
  each checkpoint.
- **Stored bytes**: ``pg_total_relation_size`` of every table (heap, indexes, TOAST),
  after a ``VACUUM ANALYZE`` so dead tuples from the writer's conditional updates do not
  count as growth.
- **Database CPU**: user + system time (``/proc/PID/stat``) of the PostgreSQL backends
  connected to this database (``pg_stat_activity``): the writer's and the sequencer's
  pooled connections. The WAL writer and checkpointer are shared by the cluster and are
  not counted; the WAL they flush is.
- **Gateway CPU**, the same way, of the execauth process tree, for the ratio of
  "instances per database".

The numbers feed docs/scaling.md; the JSON goes to bench/results/capacity-<stamp>.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from run import (  # type: ignore[import-not-found]
    BENCH,
    DEFAULT_POSTGRES,
    RESULTS,
    Load,
    cpu_seconds,
    execauth_server,
    fresh_postgres_database,
    log,
    machine,
    run_wrk,
)

WALDUMP_CANDIDATES = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_waldump"), reverse=True)
# "rmgr: Heap len (rec/tot): 54/ 54, tx: 1234, lsn: 0/01A2B3C4, prev ..., desc: ...
#  blkref #0: rel 1663/16384/16385 blk 0"
RECORD = re.compile(r"len \(rec/tot\):\s*\d+/\s*(\d+), tx:\s*(\d+),")
RELATION = re.compile(r"rel \d+/(\d+)/\d+")


def backend_pids(conn: psycopg.Connection[Any], database: str) -> list[int]:
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
        (database,),
    ).fetchall()
    return [int(pid) for (pid,) in rows]


def process_cpu(pids: list[int]) -> dict[int, float]:
    """CPU seconds of each live pid (a backend that ended meanwhile is left out)."""
    seconds: dict[int, float] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            seconds[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return seconds


def relation_bytes(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'r' AND n.nspname = 'public'"
    ).fetchall()
    return {name: int(size) for name, size in rows}


def table_rows(conn: psycopg.Connection[Any], table: str) -> int:
    count: int = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    return count


def wal_bytes_of_database(data_dir: Path, start: str, end: str, database_oid: int) -> int:
    """Sum the total length of the WAL records in [start, end) that belong to one database."""
    waldump = next(iter(WALDUMP_CANDIDATES), None)
    if waldump is None:
        raise RuntimeError("pg_waldump not found (Debian's postgresql package ships it)")
    dump = subprocess.run(
        [str(waldump), "-p", str(data_dir / "pg_wal"), "-s", start, "-e", end],
        capture_output=True,
        text=True,
        check=False,
    )
    if dump.returncode != 0 and not dump.stdout:
        raise RuntimeError(f"pg_waldump failed: {dump.stderr.strip()}")
    output = dump.stdout
    ours: set[int] = set()
    records: list[tuple[int, int, bool]] = []
    for line in output.splitlines():
        match = RECORD.search(line)
        if match is None:
            continue
        length, xid = int(match.group(1)), int(match.group(2))
        mine = any(int(oid) == database_oid for oid in RELATION.findall(line))
        if mine and xid:
            ours.add(xid)
        records.append((length, xid, mine))
    return sum(length for length, xid, mine in records if mine or (xid and xid in ours))


def run_capacity(duration: int, warmup: int, workers: int, connections: int) -> int:
    if shutil.which("wrk") is None:
        log("wrk is not installed: apt-get install -y wrk")
        return 2
    admin_url = os.environ.get("EXECAUTH_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    workdir = BENCH / ".work" / f"capacity-{stamp}"
    workdir.mkdir(parents=True)
    load = Load(2, connections, duration, warmup)
    try:
        with (
            fresh_postgres_database(admin_url) as pg_url,
            execauth_server(workdir, pg_url, "execauth-postgres", workers) as server,
            psycopg.connect(pg_url, autocommit=True) as conn,
        ):
            env = {"BENCH_API_KEY": server.extra["api_key"]}
            database = conn.info.dbname
            oid = conn.execute("SELECT oid FROM pg_database WHERE datname = %s", (database,))
            database_oid = int(oid.fetchone()[0])
            data_dir = Path(conn.execute("SHOW data_directory").fetchone()[0])
            log(f"warm-up {warmup}s")
            run_wrk(server.url, "execauth.lua", load, warmup, env)
            time.sleep(2)  # let the sequencer finish the warm-up's backlog
            conn.execute("VACUUM ANALYZE")
            executions_before = table_rows(conn, "executions")
            leaves_before = table_rows(conn, "log_leaves")
            bytes_before = relation_bytes(conn)
            pids = backend_pids(conn, database)
            db_cpu_before = process_cpu(pids)
            gateway_cpu_before = cpu_seconds(server.process.pid)
            lsn_before = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
            log(f"measured window: wrk -c{connections} -d{duration}s")
            raw = run_wrk(server.url, "execauth.lua", load, duration, env)
            deadline = time.monotonic() + 60
            while table_rows(conn, "log_leaves") - leaves_before < raw["requests"]:
                if time.monotonic() > deadline:
                    break  # report what was sequenced; the JSON says how many
                time.sleep(0.5)
            gateway_cpu = cpu_seconds(server.process.pid) - gateway_cpu_before
            db_cpu_after = process_cpu(pids)
            lsn_after = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
            new_backends = set(backend_pids(conn, database)) - set(pids)
            db_cpu = sum(db_cpu_after[p] - db_cpu_before[p] for p in db_cpu_after)
            db_cpu += sum(process_cpu(sorted(new_backends)).values())
            wal = wal_bytes_of_database(data_dir, str(lsn_before), str(lsn_after), database_oid)
            conn.execute("VACUUM ANALYZE")
            bytes_after = relation_bytes(conn)
            receipts = table_rows(conn, "executions") - executions_before
            sequenced = table_rows(conn, "log_leaves") - leaves_before
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    growth = {t: bytes_after.get(t, 0) - bytes_before.get(t, 0) for t in bytes_after}
    stored = sum(growth.values())
    seconds = raw["duration_us"] / 1e6
    per_receipt = {
        "wal_bytes": wal / receipts,
        "stored_bytes": stored / receipts,
        "database_cpu_us": 1e6 * db_cpu / receipts,
        "gateway_cpu_us": 1e6 * gateway_cpu / receipts,
    }
    report: dict[str, Any] = {
        "timestamp": stamp,
        "command": f"bench/run.py --capacity --duration {duration} --workers {workers}",
        "machine": machine(),
        "receipts": receipts,
        "sequenced": sequenced,
        "rps": raw["requests"] / seconds,
        "errors": raw["errors"],
        "per_receipt": per_receipt,
        "stored_bytes_by_table": {t: g for t, g in sorted(growth.items()) if g},
        "per_million_receipts_gib": stored / receipts * 1e6 / 2**30,
        "wal_per_million_receipts_gib": wal / receipts * 1e6 / 2**30,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"capacity-{stamp}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"receipts {receipts:,} ({report['rps']:,.0f}/s), sequenced {sequenced:,}")
    for name, value in per_receipt.items():
        print(f"  per receipt: {name:<16} {value:10,.1f}")
    for table_name, size in report["stored_bytes_by_table"].items():
        print(f"  stored: {table_name:<24} {size / receipts:8,.1f} B/receipt")
    print(
        f"  per million receipts: {report['per_million_receipts_gib']:.2f} GiB stored, "
        f"{report['wal_per_million_receipts_gib']:.2f} GiB WAL"
    )
    print(f"written: {path}")
    return 0
