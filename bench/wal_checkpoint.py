"""Where SQLite's WAL checkpoints land: on the committing writer, or on a connection of their own.

In WAL mode the connection whose commit takes the WAL past ``wal_autocheckpoint`` pages
(1,000 by default) copies the WAL back into the database file inside that commit, so a
receipt batch now and then waits for a checkpoint. This measures group commits of
``--batch`` rows shaped like receipts (the server's pragmas: WAL, ``synchronous=FULL``)
with the default, and with ``wal_autocheckpoint=0`` plus ``PRAGMA wal_checkpoint(PASSIVE)``
from a second connection every ``--interval`` seconds. Not part of ``make bench``; run

    .venv/bin/python bench/wal_checkpoint.py [--rounds 4]

and read commit p50/p99 and rows/s of the two modes side by side (docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import resource
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

RECEIPT = os.urandom(900)  # a receipt is about 0.9 KB, its evaluation input about 0.7 KB
EVALUATION_INPUT = "x" * 700


def run(mode: str, directory: Path, batches: int, batch: int, interval: float) -> str:
    path = directory / f"{mode}.db"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA synchronous=FULL")
    writer.execute("CREATE TABLE t (id TEXT PRIMARY KEY, org TEXT, k TEXT, receipt BLOB, i TEXT)")
    writer.execute("CREATE UNIQUE INDEX t_key ON t (org, k)")
    stop = threading.Event()
    checkpointer: threading.Thread | None = None
    if mode == "background":
        writer.execute("PRAGMA wal_autocheckpoint=0")

        def checkpoint() -> None:
            other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            while not stop.wait(interval):
                other.execute("PRAGMA wal_checkpoint(PASSIVE)")
            other.close()

        checkpointer = threading.Thread(target=checkpoint)
        checkpointer.start()
    latencies: list[float] = []
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_SELF)
    for b in range(batches):
        rows = [(f"e{b}-{i}", "org", f"k{b}-{i}", RECEIPT, EVALUATION_INPUT) for i in range(batch)]
        t = time.perf_counter()
        writer.execute("BEGIN IMMEDIATE")
        writer.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", rows)
        writer.execute("COMMIT")
        latencies.append(time.perf_counter() - t)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    stop.set()
    if checkpointer is not None:
        checkpointer.join()
    writer.close()
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    latencies.sort()
    rows_written = batches * batch
    return (
        f"{mode:>10}: {rows_written / wall:8,.0f} rows/s,"
        f" CPU {1e6 * cpu / rows_written:5.1f} µs/row,"
        f" commit p50 {1e3 * latencies[len(latencies) // 2]:.2f} ms,"
        f" p99 {1e3 * latencies[int(len(latencies) * 0.99)]:.2f} ms,"
        f" max {1e3 * latencies[-1]:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the two modes")
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=10, help="rows per commit")
    parser.add_argument("--interval", type=float, default=0.2, help="background checkpoint period")
    args = parser.parse_args()
    for _ in range(args.rounds):
        for mode in ("writer", "background"):
            with tempfile.TemporaryDirectory() as directory:
                print(run(mode, Path(directory), args.batches, args.batch, args.interval))


if __name__ == "__main__":
    main()
