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


def run_until(writer: ReceiptWriter, event: threading.Event) -> int:
    """Run the writer until ``event`` is set, stop it (joining its thread), and count
    the rows its background runs committed."""
    writer.start()
    try:
        assert event.wait(WAIT)
    finally:
        writer.stop()
    with writer.engine.connect() as conn:
        committed = int(conn.execute(text("SELECT count(*) FROM passes")).scalar_one())
    writer.engine.dispose()
    return committed


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
    committed = run_until(writer, reported)
    assert held[0] > 0
    assert committed >= 1  # reported once committed


def test_a_failed_background_run_is_not_reported(tmp_path: Path) -> None:
    writer = writer_on(tmp_path)
    held: list[float] = []
    attempted = threading.Event()

    def job(conn: Connection) -> bool:
        conn.execute(text("INSERT INTO passes VALUES (1)"))
        attempted.set()
        raise RuntimeError("the pass fails")

    writer.run_in_background(job, INTERVAL, on_done=held.append)
    # Stopping joins the writer's thread: a report after the failed run would be in by now.
    committed = run_until(writer, attempted)
    assert held == []
    assert committed == 0  # rolled back whole
