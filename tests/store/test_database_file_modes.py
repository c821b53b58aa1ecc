"""The SQLite database and its ``-wal``/``-shm`` files are created 0600, like the secret key."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from execauth.store.database import make_engine, upgrade


@pytest.fixture
def usual_umask() -> Iterator[None]:
    previous = os.umask(0o022)  # the common default, under which SQLite writes 0644
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("usual_umask")
def test_a_new_database_and_its_wal_and_shm_files_are_owner_only(tmp_path: Path) -> None:
    database = tmp_path / "execauth.db"
    engine = make_engine(f"sqlite:///{database}")
    try:
        upgrade(engine)
        with engine.connect() as conn:  # WAL mode keeps -wal and -shm while connected
            conn.exec_driver_sql("SELECT 1")
            files = [database, tmp_path / "execauth.db-wal", tmp_path / "execauth.db-shm"]
            assert {f.name: _mode(f) for f in files} == {f.name: 0o600 for f in files}
    finally:
        engine.dispose()


@pytest.mark.usefixtures("usual_umask")
def test_an_existing_database_keeps_the_mode_its_operator_chose(tmp_path: Path) -> None:
    database = tmp_path / "execauth.db"
    database.touch(mode=0o640)
    database.chmod(0o640)
    engine = make_engine(f"sqlite:///{database}")
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    assert _mode(database) == 0o640
