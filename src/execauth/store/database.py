"""Engine construction and schema migrations for SQLite (default) and PostgreSQL."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

MIGRATIONS = Path(__file__).parent / "migrations"


def normalize_url(url: str) -> str:
    """Accept plain ``postgresql://`` URLs and use psycopg 3 for them."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def make_engine(url: str, *, schema: str | None = None) -> Engine:
    """An engine configured for durability.

    SQLite: WAL with ``synchronous=FULL`` (a committed receipt survives power
    loss), a busy timeout for the rare second writer (the CLI), foreign keys on.
    ``schema`` (PostgreSQL only) pins the search path, which tests use for isolation.
    """
    url = normalize_url(url)
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 10},
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=FULL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    connect_args: dict[str, Any] = {}
    if schema is not None:
        connect_args["options"] = f"-csearch_path={schema}"
    return create_engine(url, connect_args=connect_args, pool_size=10, pool_pre_ping=True)


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest migration (``execauth db upgrade``; also run by serve)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def is_unavailable(error: SQLAlchemyError) -> bool:
    """Whether ``error`` means the database cannot be reached or written right now.

    Connection refused or lost, disk full, locked, read-only, I/O error, pool
    exhausted: the service is unavailable (503, retry later). A missing table or bad
    SQL is a bug and stays a 500. SQLite reports both kinds as ``OperationalError``;
    only its generic ``SQLITE_ERROR`` code is the bug kind.
    """
    if isinstance(error, PoolTimeout):
        return True
    if not isinstance(error, DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    if not isinstance(error, OperationalError):
        return False
    original = error.orig
    if isinstance(original, sqlite3.Error):
        return original.sqlite_errorcode & 0xFF != sqlite3.SQLITE_ERROR
    return True
