"""On SQLite the Merkle logs live in a file of their own (``execauth.merkle.db``).

What that buys: a sequencing pass writes the log's file only, so the receipt writer
never waits for it. What it must keep: every receipt placed once, in order, whatever
crashes between placing receipts and clearing them off the queue; and a database
upgraded from the one-file layout keeps its logs, byte for byte.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import Engine, Table, func, select

from execauth.keyring import Keyring, generate_signing_key
from execauth.server_secret import ServerSecret
from execauth.serving import sequencer as sequencer_module
from execauth.serving.sequencer import Sequencer
from execauth.store.database import (
    begin_writing,
    log_apart,
    log_file_of,
    logs_in_place,
    make_engine,
    migrate,
    upgrade,
)
from execauth.store.execution_writes import insert_batch
from execauth.store.ledger import LogStore, dequeue_placed, sequence_pending
from execauth.store.signing_keys import SigningKeyStore
from execauth.store.tables import log_checkpoints, log_leaves, log_nodes, log_pending
from execauth.tenancy.audit import AuditEvent
from tests.store.test_sequence_pending import (
    NOW,
    ORGS,
    Receipts,
    assert_logs_are_rfc9162,
    create_orgs,
    notes,
)

LOG_TABLES = (log_leaves, log_nodes, log_checkpoints)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "execauth.db"


@pytest.fixture
def engine(path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    create_orgs(engine)
    yield engine
    engine.dispose()


def place(engine: Engine, limit: int = 100) -> list[int]:
    """A pass as the log keeper runs it: placed receipts stay queued."""
    with engine.begin() as conn:
        return sequence_pending(conn, limit=limit, now=NOW, sign=notes, dequeue=False)


def count(engine: Engine, table: Table) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def test_the_log_file_sits_beside_the_database_and_is_its_owners_only(
    engine: Engine, path: Path
) -> None:
    log_file = log_file_of(str(path))
    assert log_file == path.with_name("execauth.merkle.db")
    assert log_apart(engine)
    assert log_file.stat().st_mode & 0o077 == 0


def test_a_database_in_memory_keeps_its_logs_in_its_one_file() -> None:
    assert log_file_of(":memory:") is None
    assert log_file_of("file:execauth?mode=memory") is None
    engine = make_engine("sqlite://")
    assert not log_apart(engine)
    engine.dispose()


def test_a_pass_never_takes_the_receipts_write_lock(engine: Engine, path: Path) -> None:
    Receipts(engine).store([ORGS[0]] * 3)
    # The receipt writer mid-transaction, its write lock held: a pass that wanted that
    # lock would wait out the busy timeout, then fail.
    with closing(sqlite3.connect(path, isolation_level=None)) as writer:
        writer.execute("BEGIN IMMEDIATE")
        assert len(place(engine)) == 3
        writer.execute("ROLLBACK")


def test_the_receipt_writer_commits_while_a_pass_holds_the_log(engine: Engine, path: Path) -> None:
    receipts = Receipts(engine)
    # The writer's engine, as build_write_path makes it; a pass under way holds the log.
    writer_engine = make_engine(f"sqlite:///{path}", with_log=False)
    with closing(sqlite3.connect(log_file_of(str(path)) or "", isolation_level=None)) as a_pass:
        a_pass.execute("BEGIN IMMEDIATE")
        with writer_engine.connect() as conn, conn.begin():
            begin_writing(conn)  # as the writer begins: BEGIN IMMEDIATE
            insert_batch(conn, [(r, None) for r in receipts.records([ORGS[0]])])
        a_pass.execute("ROLLBACK")
    writer_engine.dispose()
    assert count(engine, log_pending) == 1


def test_placed_receipts_stay_queued_and_are_not_placed_again(engine: Engine) -> None:
    receipts = Receipts(engine)
    receipts.store([ORGS[0], ORGS[1], ORGS[0]])
    assert len(place(engine)) == 3
    assert place(engine) == []
    assert count(engine, log_pending) == 3
    assert count(engine, log_leaves) == 3
    assert_logs_are_rfc9162(engine, receipts)


def test_clearing_the_queue_takes_only_placed_receipts(engine: Engine) -> None:
    receipts = Receipts(engine)
    receipts.store([ORGS[0]] * 2)
    place(engine)
    receipts.store([ORGS[1]])  # stored after the pass: not placed yet
    assert LogStore(engine).dequeue_placed() == 2
    assert count(engine, log_pending) == 1
    assert len(place(engine)) == 1
    assert_logs_are_rfc9162(engine, receipts)


def test_a_keeper_restarted_between_placing_and_clearing_places_only_what_is_new(
    engine: Engine, path: Path
) -> None:
    receipts = Receipts(engine)
    receipts.store([ORGS[0]] * 5)
    place(engine)  # committed; the process dies before it clears the queue
    restarted = make_engine(f"sqlite:///{path}")
    receipts.store([ORGS[0]] * 2)
    assert len(place(restarted)) == 2
    with restarted.begin() as conn:
        assert dequeue_placed(conn) == 7
    restarted.dispose()
    assert_logs_are_rfc9162(engine, receipts)


def test_a_round_places_a_backlog_larger_than_one_batch(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sequencer_module, "BATCH", 4)
    receipts = Receipts(engine)
    receipts.store([ORGS[0]] * 9)
    secret = ServerSecret("s" * 40)
    keys = SigningKeyStore(engine)
    first = generate_signing_key(secret, NOW)
    keys.insert_key(first, AuditEvent(None, NOW, "test", "signing_key.created", first.key_id))
    keyring = Keyring(keys, secret)
    keyring.refresh(NOW)
    sequencer = Sequencer(
        LogStore(engine), keyring, "https://execauth.test", interval_seconds=1, clock=lambda: NOW
    )
    assert sequencer.run_once() == 9
    assert count(engine, log_pending) == 0
    assert count(engine, log_leaves) == 9


# --- the migration from one file ------------------------------------------------------


def logs_of(engine: Engine) -> dict[str, list[tuple[object, ...]]]:
    with engine.connect() as conn:
        return {
            table.name: [
                tuple(row) for row in conn.execute(select(table).order_by(*table.primary_key))
            ]
            for table in LOG_TABLES
        }


@pytest.fixture
def at_0013(path: Path) -> Iterator[Engine]:
    """A database at 0013, logs in its one file: some receipts placed, some queued."""
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine, "0013")
    create_orgs(engine)
    receipts = Receipts(engine)
    receipts.store(ORGS * 3)
    with engine.begin() as conn:
        sequence_pending(conn, limit=11, now=NOW, sign=notes)
    receipts.store(ORGS)
    yield engine
    engine.dispose()


def tables_in(path: Path, schema: str) -> set[str]:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("ATTACH DATABASE ? AS log", (str(log_file_of(str(path))),))
        return {row[0] for row in conn.execute(f"SELECT name FROM {schema}.sqlite_master")}


def test_the_upgrade_moves_the_logs_into_their_file_unchanged(at_0013: Engine, path: Path) -> None:
    before = logs_of(at_0013)
    assert sum(map(len, before.values())) > 11
    upgrade(at_0013)
    assert {t.name for t in LOG_TABLES} <= tables_in(path, "log")
    assert {t.name for t in LOG_TABLES}.isdisjoint(tables_in(path, "main"))
    assert logs_of(at_0013) == before


def test_the_moved_logs_stay_append_only(at_0013: Engine) -> None:
    upgrade(at_0013)
    with pytest.raises(Exception, match="append-only"), at_0013.begin() as conn:
        conn.exec_driver_sql("DELETE FROM log_leaves")


def test_the_receipts_queued_before_the_upgrade_continue_their_logs(at_0013: Engine) -> None:
    upgrade(at_0013)
    assert len(place(at_0013)) == 5 + 4  # the 15 stored before less the 11 placed, and 5 more
    with at_0013.begin() as conn:
        assert dequeue_placed(conn) == 9
    assert count(at_0013, log_leaves) == 20


def test_an_interrupted_upgrade_is_completed_by_the_next(at_0013: Engine, path: Path) -> None:
    before = logs_of(at_0013)
    # As a crash leaves it after the copy began: a partial copy in the log file, the
    # logs still in the main file, the revision not recorded.
    with closing(sqlite3.connect(log_file_of(str(path)) or "")) as log_file:
        log_file.execute("CREATE TABLE log_leaves (org_id VARCHAR(64))")
        log_file.execute("INSERT INTO log_leaves VALUES ('partial')")
        log_file.commit()
    upgrade(at_0013)
    assert logs_of(at_0013) == before


def test_the_downgrade_moves_the_logs_back(at_0013: Engine, path: Path) -> None:
    before = logs_of(at_0013)
    upgrade(at_0013)
    migrate(at_0013, "0013", down=True)
    assert {t.name for t in LOG_TABLES} <= tables_in(path, "main")
    assert {t.name for t in LOG_TABLES}.isdisjoint(tables_in(path, "log"))
    assert logs_of(at_0013) == before


def test_a_service_will_not_serve_a_move_left_half_done(at_0013: Engine, path: Path) -> None:
    upgrade(at_0013)
    # As an interrupted downgrade leaves it: the logs copied back, not yet dropped here.
    with at_0013.connect() as conn:
        conn.exec_driver_sql("CREATE TABLE main.log_nodes (org_id VARCHAR(64))")
    assert not logs_in_place(at_0013)
