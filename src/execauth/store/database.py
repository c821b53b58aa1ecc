"""Engine construction and schema migrations for SQLite (default) and PostgreSQL."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Connection, Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

MIGRATIONS = Path(__file__).parent / "migrations"

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_Statements = TypeVar("_Statements", bound="DataclassInstance")


def normalize_url(url: str) -> str:
    """Accept plain ``postgresql://`` URLs and use psycopg 3 for them."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def in_format_style(statements: _Statements, **changes: str) -> _Statements:
    """A dataclass of SQL texts written with SQLite's ``?`` placeholders, with psycopg's
    ``%s`` instead, then ``changes`` (the statements whose PostgreSQL text differs)."""
    converted = {
        field.name: getattr(statements, field.name).replace("?", "%s")
        for field in dataclasses.fields(statements)
    }
    return dataclasses.replace(statements, **(converted | changes))


def bound(column: Column[Any], value: Any, conn: Connection) -> Any:
    """``value`` as SQLAlchemy would bind it to ``column`` (e.g. a UTC datetime: naive ones
    refused, stored naive on SQLite), for statements handed to the driver as text."""
    return binder(column, conn)(value)


def binder(column: Column[Any], conn: Connection) -> Callable[[Any], Any]:
    """``bound`` for many values of one column: the processor looked up once."""
    process = column.type.dialect_impl(conn.dialect).bind_processor(conn.dialect)
    return _unchanged if process is None else process


def _unchanged(value: Any) -> Any:
    return value


def as_columns(rows: Sequence[tuple[Any, ...]]) -> tuple[list[Any], ...]:
    """Rows as one list per column: the arrays of PostgreSQL's ``unnest`` statements, which
    take a batch in one statement where psycopg's ``executemany`` would send and wait row
    by row."""
    return tuple(list(column) for column in zip(*rows, strict=True))


LOG_SCHEMA = "log"  # the name the Merkle log's SQLite file is attached under


def log_file_of(database: str | None) -> Path | None:
    """The SQLite file that holds the Merkle logs of the database file ``database``:
    ``execauth.db`` → ``execauth.merkle.db`` (``None``: in memory or a ``file:`` URI,
    where the logs stay in the one database).

    A file of its own because SQLite has one write lock per file: placing receipts in
    their logs, in the file of the receipts, held the receipt writer's lock for about
    4 ms a pass (docs/decisions.md, "The Merkle log in a file of its own on SQLite").
    """
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    path = Path(database)
    return path.with_name(f"{path.stem}.merkle{path.suffix}")


def log_apart(engine: Engine) -> bool:
    """Whether this database keeps its Merkle logs in a file of their own (``log_file_of``)."""
    return engine.dialect.name == "sqlite" and log_file_of(engine.url.database) is not None


def make_engine(url: str, *, schema: str | None = None, with_log: bool = True) -> Engine:
    """An engine configured for durability.

    SQLite: WAL with ``synchronous=FULL`` (a committed receipt survives power
    loss), a busy timeout for the rare second writer (the CLI), foreign keys on.
    ``schema`` (PostgreSQL only) pins the search path, which tests use for isolation.

    A SQLite database file comes with the Merkle logs' file (``log_file_of``), attached
    to every connection as ``log``: SQLite finds a table named without its schema in
    whichever attached file holds it, so every query reads the logs as if they were in
    the main file. ``with_log=False`` is for the receipt writer alone: ``BEGIN
    IMMEDIATE`` takes the write lock of every attached file, and the writer must never
    wait for the log's.
    """
    url = normalize_url(url)
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 10},
        )
        _create_private(engine.url.database)
        log_file = log_file_of(engine.url.database) if with_log else None
        if log_file is not None:
            _create_private(str(log_file))

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=FULL")
            cursor.execute("PRAGMA foreign_keys=ON")
            if log_file is not None:
                cursor.execute(f"ATTACH DATABASE ? AS {LOG_SCHEMA}", (str(log_file),))
                cursor.execute(f"PRAGMA {LOG_SCHEMA}.journal_mode=WAL")
                cursor.execute(f"PRAGMA {LOG_SCHEMA}.synchronous=FULL")
            cursor.close()

        return engine
    connect_args: dict[str, Any] = {}
    if schema is not None:
        connect_args["options"] = f"-csearch_path={schema}"
    return create_engine(url, connect_args=connect_args, pool_size=10, pool_pre_ping=True)


def _create_private(database: str | None) -> None:
    """Create a new SQLite database file readable by its owner only (0600).

    It holds receipts, API-key hashes and sealed signing keys; SQLite would create it
    0644 (less the umask). SQLite gives the ``-wal`` and ``-shm`` files it creates later
    the database file's own permissions, so those are 0600 too. An existing file keeps
    the mode its operator chose.
    """
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    with contextlib.suppress(FileExistsError):
        os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


class WriterLock:
    """Serializes the receipt writers of every process that shares one SQLite file.

    SQLite allows one writer at a time and makes the others wait in its busy
    handler, which sleeps in steps of 1, 2, 5, 10… ms: under ``serve --workers N``
    that sleep would land in the latency of every receipt in the waiting batch. An
    exclusive ``flock`` on a file beside the database hands the turn over as soon as
    it is free (the kernel wakes the waiter), and it is released even when a process
    dies. PostgreSQL and in-memory SQLite need none (``for_engine`` returns a no-op).
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._fd: int | None = None
        # flock belongs to the open file, not to the thread: two threads of this process
        # sharing ``_fd`` would both "hold" it, and a second LOCK_EX on a held file is a
        # non-atomic conversion (the lock is dropped, then requested again) that has
        # left every waiter blocked. So threads take turns here first.
        self._threads = threading.Lock()

    @classmethod
    def for_engine(cls, engine: Engine) -> WriterLock:
        database = engine.url.database
        if engine.dialect.name != "sqlite" or not database or database == ":memory:":
            return cls(None)
        if database.startswith("file:"):
            return cls(None)
        return cls(Path(database + ".writer-lock"))

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        if self.path is None:
            yield
            return
        with self._threads:  # blocks without the GIL
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._fd, fcntl.LOCK_EX)  # blocks without the GIL
            try:
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def logs_in_place(engine: Engine) -> bool:
    """Whether the log's file holds the logs, and only it (SQLite, log apart): false when
    it was lost, when a database file was restored without it (docs/operations.md,
    "Backup and restore"), or when a move between the files (migration 0014, up or
    down) was interrupted and both hold a copy, of which queries would read the main
    file's."""
    counts: dict[str, int] = {}
    with engine.connect() as conn:
        for schema in ("main", LOG_SCHEMA):
            counts[schema] = conn.exec_driver_sql(
                f"SELECT count(*) FROM {schema}.sqlite_master WHERE type = 'table'"  # noqa: S608
                " AND name IN ('log_leaves', 'log_nodes', 'log_checkpoints')"
            ).scalar_one()
    return counts == {"main": 0, LOG_SCHEMA: 3}


def back_up_sqlite(engine: Engine, directory: Path) -> list[Path]:
    """Copy a SQLite database, and its log's file, into ``directory`` (new or empty), under
    the names they have; online, the service keeps answering. The files written.

    Each copy is one ``VACUUM INTO``: a consistent snapshot of its file, WAL included.
    The receipts' file first, then the log's: a receipt is cleared off the queue only
    once its log holds it, so the later snapshot of the log holds every receipt that
    the earlier snapshot of the receipts no longer queues. The other order could restore
    receipts that neither the log nor the queue has. Created 0600, like the live files;
    flushed to disk before this returns (``VACUUM INTO`` does not).
    """
    database = engine.url.database
    log_file = log_file_of(database) if engine.dialect.name == "sqlite" else None
    if database is None or log_file is None:
        raise ValueError("only a SQLite database file is backed up this way")
    directory.mkdir(parents=True, exist_ok=True)
    copies = [("main", directory / Path(database).name), (LOG_SCHEMA, directory / log_file.name)]
    for _, target in copies:
        # VACUUM INTO writes into a new or empty file, with the mode it finds.
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    with engine.connect() as conn:
        for schema, target in copies:
            conn.exec_driver_sql(f"VACUUM {schema} INTO ?", (str(target),))
    for _, target in copies:
        with open(target, "rb") as copy:
            os.fsync(copy.fileno())
    directory_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(directory_fd)
    finally:
        os.close(directory_fd)
    for _, target in copies:
        with contextlib.closing(sqlite3.connect(target)) as check:
            (verdict,) = check.execute("PRAGMA integrity_check").fetchone()
        if verdict != "ok":
            raise RuntimeError(f"{target}: integrity check failed: {verdict}")
    return [target for _, target in copies]


def begin_writing(conn: Connection) -> None:
    """Take SQLite's write lock now, inside the transaction ``conn.begin()`` opened.

    pysqlite would begin lazily, at the first INSERT: reads before it (the
    idempotency priors, the sequencer's tree size) would then see a snapshot
    another process may change before we write. ``BEGIN IMMEDIATE`` makes the
    whole transaction one serialized unit, across processes. PostgreSQL's writer
    transactions lock rows explicitly instead (``FOR UPDATE``, advisory locks).
    """
    if conn.dialect.name == "sqlite":
        execute_on_sqlite(conn, "BEGIN IMMEDIATE")


def execute_on_sqlite(
    conn: Connection, statement: str, parameters: Sequence[Any] = (), *, many: bool = False
) -> sqlite3.Cursor:
    """``conn.exec_driver_sql`` for the receipt writer's statements on SQLite, handed to
    ``sqlite3`` itself, in ``conn``'s transaction.

    The writer runs a handful of statements per batch; SQLAlchemy's execution context
    and result objects around each cost more than SQLite's own work on a small
    statement (a conditional ``UPDATE … RETURNING`` 14.4 against 3.2 µs, measured;
    docs/performance.md). A driver error is raised as the ``DBAPIError`` subclass
    SQLAlchemy would raise for it, so callers and the error mapping see no difference.
    """
    driver = conn.connection.driver_connection
    assert isinstance(driver, sqlite3.Connection)
    try:
        if many:
            return driver.executemany(statement, parameters)
        return driver.execute(statement, parameters)
    except sqlite3.Error as exc:
        raise DBAPIError.instance(
            statement, parameters, exc, sqlite3.Error, dialect=conn.dialect, ismulti=many
        ) from exc


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest migration (``execauth db upgrade``; also run by serve)."""
    migrate(engine, "head")


def migrate(engine: Engine, revision: str, *, down: bool = False) -> None:
    """Upgrade (with ``down``, downgrade) the schema to ``revision``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    # Not in a transaction of ours: alembic begins and commits its own, and a revision
    # that must commit part of its work first (0014) can.
    with engine.connect() as connection:
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)


def schema_is_current(engine: Engine) -> bool:
    """Whether every migration has been applied (``serve`` with ``migrate_on_start`` off)."""
    heads = set(ScriptDirectory(str(MIGRATIONS)).get_heads())
    with engine.connect() as connection:
        applied = set(MigrationContext.configure(connection).get_current_heads())
    return applied == heads


def refuses_nul(error: SQLAlchemyError) -> bool:
    """Whether PostgreSQL's driver refused a value holding U+0000, which ``text`` cannot store.

    Bodies and query parameters are refused before they get here (api/wire,
    api/pagination); a path parameter (``/operator/executions/a%00b``) reaches the
    query, and psycopg refuses it before sending: bad input, not an outage or a bug.
    """
    return (
        isinstance(error, DBAPIError)
        and type(error.orig).__module__.startswith("psycopg")
        and "NUL (0x00)" in str(error.orig)
    )


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
