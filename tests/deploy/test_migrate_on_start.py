"""``EXECAUTH_MIGRATE_ON_START=false``: replicas serve the schema one ``db upgrade`` made.

Several replicas that each migrate on start would race each other's migrations; with the
setting off, ``serve`` neither migrates nor serves a schema that is not up to date.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import inspect

from execauth.config import Settings
from execauth.serving.runtime import prepare
from execauth.store.database import make_engine, schema_is_current, upgrade


def settings(tmp_path: Path, *, migrate_on_start: bool) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path / 'execauth.db'}",
        secret_key="test-secret-" + "s" * 32,
        admin_token="test-admin-token-" + "x" * 20,
        migrate_on_start=migrate_on_start,
    )


def test_serve_without_migrating_refuses_a_database_that_was_never_upgraded(
    tmp_path: Path,
) -> None:
    with pytest.raises(SystemExit, match="execauth db upgrade"):
        prepare(settings(tmp_path, migrate_on_start=False))


def test_serve_without_migrating_creates_no_table(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        prepare(settings(tmp_path, migrate_on_start=False))
    engine = make_engine(f"sqlite:///{tmp_path / 'execauth.db'}")
    assert inspect(engine).get_table_names() == []
    engine.dispose()


def test_serve_without_migrating_starts_on_a_database_db_upgrade_migrated(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'execauth.db'}")
    upgrade(engine)
    engine.dispose()
    assert prepare(settings(tmp_path, migrate_on_start=False)) is None  # token configured


def test_serve_migrates_on_start_by_default(tmp_path: Path) -> None:
    prepare(settings(tmp_path, migrate_on_start=True))
    engine = make_engine(f"sqlite:///{tmp_path / 'execauth.db'}")
    assert schema_is_current(engine)
    engine.dispose()


def test_migrate_on_start_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXECAUTH_MIGRATE_ON_START", "false")
    assert Settings().migrate_on_start is False
