"""The writer's background job (the sequencer's pass on SQLite) runs in a transaction of
its own on the writer's connection; each run it commits is reported with how long it held
the writer, its commit included (``execauth_sequencer_transaction_seconds``), and a run
that fails is not."""

from __future__ import annotations

import threading
from pathlib import Path

from sqlalchemy import Connection, text

from execauth.serving.receipt_writer import ReceiptWriter
from execauth.store.database import make_engine

INTERVAL = 0.05
WAIT = 10.0  # a guard against a hang, not a measurement


def writer_on(tmp_path: Path) -> ReceiptWriter:
    engine = make_engine(f"sqlite:///{tmp_path / 'writer.db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE passes (n INTEGER)"))
    return ReceiptWriter(engine)


def test_a_committed_background_run_reports_how_long_it_held_the_writer(tmp_path: Path) -> None:
    writer = writer_on(tmp_path)
    held: list[float] = []
    reported = threading.Event()

    def job(conn: Connection) -> bool:
        conn.execute(text("INSERT INTO passes VALUES (1)"))
        return False

    def done(seconds: float) -> None:
        held.append(seconds)
        reported.set()

    writer.run_in_background(job, INTERVAL, on_done=done)
    writer.start()
    try:
        assert reported.wait(WAIT)
    finally:
        writer.stop()
    assert held[0] > 0
    with writer.engine.connect() as conn:  # reported once committed
        assert conn.execute(text("SELECT count(*) FROM passes")).scalar_one() >= 1
    writer.engine.dispose()


def test_a_failed_background_run_is_not_reported(tmp_path: Path) -> None:
    writer = writer_on(tmp_path)
    held: list[float] = []
    attempted = threading.Event()

    def job(conn: Connection) -> bool:
        conn.execute(text("INSERT INTO passes VALUES (1)"))
        attempted.set()
        raise RuntimeError("the pass fails")

    writer.run_in_background(job, INTERVAL, on_done=held.append)
    writer.start()
    try:
        assert attempted.wait(WAIT)
    finally:
        writer.stop()  # joins the thread: a report after the failed run would be in by now
    assert held == []
    with writer.engine.connect() as conn:  # rolled back whole
        assert conn.execute(text("SELECT count(*) FROM passes")).scalar_one() == 0
    writer.engine.dispose()
