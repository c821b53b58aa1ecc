"""``execauth db backup DIR``: a SQLite database and its Merkle log file, copied online in
the order a restore needs; and a service that refuses to start on a database restored
without its log file."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from execauth.config import Settings
from execauth.serving.runtime import prepare
from execauth.store.database import make_engine, upgrade
from execauth.store.ledger import sequence_pending
from execauth.store.tables import log_leaves, log_pending
from tests.serving import clean_env, run_cli
from tests.store.test_sequence_pending import NOW, ORGS, Receipts, create_orgs, notes


@pytest.fixture
def database(tmp_path: Path) -> Path:
    """A database with receipts, some in their logs (placed, still queued), some not."""
    path = tmp_path / "live" / "execauth.db"
    path.parent.mkdir()
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    create_orgs(engine)
    receipts = Receipts(engine)
    receipts.store(ORGS)
    with engine.begin() as conn:
        sequence_pending(conn, limit=100, now=NOW, sign=notes, dequeue=False)
    receipts.store(ORGS[:2])
    engine.dispose()
    return path


def backup(database: Path, directory: Path) -> tuple[int, str]:
    env = clean_env(EXECAUTH_DATABASE_URL=f"sqlite:///{database}")  # no secret needed
    done = run_cli(env, database.parent, "db", "backup", str(directory))
    return done.returncode, done.stderr


def serving(database: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{database}",
        secret_key="test-secret-" + "s" * 32,
        admin_token="test-admin-token-" + "x" * 20,
    )


def counts(engine: Engine) -> tuple[int, int]:
    with engine.connect() as conn:
        leaves = conn.execute(select(func.count()).select_from(log_leaves)).scalar_one()
        queued = conn.execute(select(func.count()).select_from(log_pending)).scalar_one()
    return int(leaves), int(queued)


def test_the_backup_holds_the_database_and_its_log_file(database: Path, tmp_path: Path) -> None:
    code, output = backup(database, tmp_path / "backup")
    assert code == 0, output
    assert sorted(p.name for p in (tmp_path / "backup").iterdir()) == [
        "execauth.db",
        "execauth.merkle.db",
    ]
    restored = make_engine(f"sqlite:///{tmp_path / 'backup' / 'execauth.db'}")
    assert counts(restored) == (len(ORGS), len(ORGS) + 2)
    restored.dispose()


def test_the_backup_files_are_their_owners_only(database: Path, tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        assert backup(database, tmp_path / "backup")[0] == 0
    finally:
        os.umask(previous)
    for copy in (tmp_path / "backup").iterdir():
        assert stat.S_IMODE(copy.stat().st_mode) == 0o600, copy


def test_the_backup_never_overwrites_an_earlier_one(database: Path, tmp_path: Path) -> None:
    assert backup(database, tmp_path / "backup")[0] == 0
    code, output = backup(database, tmp_path / "backup")
    assert code == 2
    assert "new or empty directory" in output


def test_a_database_restored_without_its_log_file_is_refused(
    database: Path, tmp_path: Path
) -> None:
    assert backup(database, tmp_path / "backup")[0] == 0
    (tmp_path / "backup" / "execauth.merkle.db").unlink()  # restored alone
    with pytest.raises(SystemExit, match=r"execauth\.merkle\.db does not hold the Merkle logs"):
        prepare(serving(tmp_path / "backup" / "execauth.db"))


def test_a_database_restored_without_the_log_file_of_its_backup_is_refused(
    database: Path, tmp_path: Path
) -> None:
    assert backup(database, tmp_path / "backup")[0] == 0
    engine = make_engine(f"sqlite:///{database}")
    Receipts(engine, first=100).store(ORGS[:1])  # after the backup: in the live files only
    with engine.begin() as conn:
        sequence_pending(conn, limit=100, now=NOW, sign=notes, dequeue=False)
    engine.dispose()
    # The backup's database, with the live (newer) log file beside it.
    (tmp_path / "backup" / "execauth.merkle.db").unlink()
    shutil.copy(database.with_name("execauth.merkle.db"), tmp_path / "backup")
    with pytest.raises(SystemExit, match=rf"is newer than the database: the logs of {ORGS[0]}"):
        prepare(serving(tmp_path / "backup" / "execauth.db"))


def test_the_backup_needs_no_secret_and_creates_none(database: Path, tmp_path: Path) -> None:
    assert backup(database, tmp_path / "backup")[0] == 0
    assert not (database.parent / "execauth-secret.key").exists()


def test_a_backup_of_a_database_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    code, output = backup(tmp_path / "nowhere.db", tmp_path / "backup")
    assert code == 2
    assert "no database at" in output
    assert not (tmp_path / "nowhere.db").exists()
