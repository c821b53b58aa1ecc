"""SQLite: the Merkle logs move to a database file of their own (``execauth.merkle.db``)

SQLite has one write lock per file. Placing receipts in their logs in the receipts' own
file held the receipt writer's lock for about 4 ms a pass, four passes a second, and
every receipt that arrived meanwhile waited for it (docs/decisions.md, "The Merkle log
in a file of its own on SQLite"). ``make_engine`` attaches the log file to every
connection as ``log``; this revision moves the three log tables, their rows and their
append-only triggers there. The queue of receipts not yet placed (``log_pending``)
stays with the receipts: it is filled in the transaction that stores them.

SQLite commits the files of one transaction one after the other, the main file first,
so a crash could keep main's drop and lose the log file's copy. Hence two commits, in
this order: the copy, on its own (an autocommit block: each statement commits); then
the drop, with the revision. An interrupted run leaves both copies; main's is the
authority while it exists, so a rerun replaces the log file's and copies again.

PostgreSQL, and SQLite in memory or through a ``file:`` URI (no log file): nothing.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import Connection

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

LOG_TABLES = ("log_leaves", "log_nodes", "log_checkpoints")


def upgrade() -> None:
    _move(source="main", target="log")


def downgrade() -> None:
    _move(source="log", target="main")


def _move(*, source: str, target: str) -> None:
    """The log tables from ``source`` to ``target``: copied (committed on its own), then
    dropped from ``source`` with the revision."""
    if not _log_file_attached():
        return
    with op.get_context().autocommit_block():
        _copy(op.get_bind(), source=source, target=target)
    for table in LOG_TABLES:
        op.execute(f"DROP TABLE {source}.{table}")


def _log_file_attached() -> bool:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return False
    return "log" in {row[1] for row in bind.exec_driver_sql("PRAGMA database_list")}


def _copy(conn: Connection, *, source: str, target: str) -> None:
    """Each log table of ``source`` (its definition, rows and triggers) into ``target``,
    replacing what an interrupted run left there."""
    for table in LOG_TABLES:
        definitions = conn.exec_driver_sql(
            f"SELECT type, name, sql FROM {source}.sqlite_master"  # noqa: S608 - constants
            " WHERE tbl_name = ? AND sql IS NOT NULL ORDER BY type = 'table' DESC",
            (table,),
        ).all()
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {target}.{table}")
        for kind, name, sql in definitions:
            # "CREATE TABLE log_leaves (…" → "CREATE TABLE log.log_leaves (…"; a trigger's
            # ON clause names its table unqualified, which SQLite resolves in its schema.
            created = f"CREATE {kind.upper()} "
            conn.exec_driver_sql(sql.replace(created + name, f"{created}{target}.{name}", 1))
            if kind == "table":
                conn.exec_driver_sql(f"INSERT INTO {target}.{table} SELECT * FROM {source}.{table}")  # noqa: S608
