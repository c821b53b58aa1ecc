"""The per-organization Merkle logs in the database: sequencing, nodes, checkpoints.

``ledger`` holds the pure hashing and proofs; this module stores what they need.
Each receipt stored is queued for its log (``log_pending``, filled in the transaction
that inserts it: ``store/execution_writes.py``); sequencing gives it the next contiguous
``log_index`` of its org's log (``log_leaves``, the one record of that position) and
takes it off the queue in the same transaction. Every complete aligned subtree's root
is stored once (``log_nodes``), so a proof needs O(log² n) lookups, never a pass over
the log. The three log tables are append-only (database triggers).

Exactly one sequencer works at a time: on PostgreSQL a transaction-scoped
advisory lock serializes instances; on SQLite the database's single writer does.
If two ever raced, the primary key (org, log_index) would reject the loser's
transaction whole, so a gap or a duplicate index cannot be committed. A crash
rolls the batch back and the next run picks the same executions up again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
from sqlalchemy import Connection, Engine, func, or_, select, union_all
from sqlalchemy.sql.elements import ColumnElement

from execauth.ledger.merkle import (
    EMPTY_ROOT,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
)
from execauth.receipts import signing_payload
from execauth.store.database import WriterLock, as_columns, bound, in_format_style
from execauth.store.tables import executions, log_checkpoints, log_leaves, log_nodes
from execauth.wire_time import epoch_millis

SEQUENCER_LOCK = 0x65786563617574  # "execaut": one advisory-lock id for every instance


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    org_id: str
    tree_size: int
    root_hash: bytes
    note: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class LeafPosition:
    log_index: int
    leaf_hash: bytes


# (org_id, tree_size, root_hash) -> the signed note text
CheckpointSigner = Callable[[str, int, bytes], str]


class _Frontier:
    """The right edge of a log: roots of its complete subtrees, largest first."""

    def __init__(self, size: int, nodes: list[tuple[int, bytes]]) -> None:
        self.size = size
        self.nodes = nodes  # (level, hash)

    def append(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        """Add one leaf; return the complete subtrees it closed as (level, index, hash)."""
        self.nodes.append((0, leaf))
        self.size += 1
        closed = []
        while len(self.nodes) >= 2 and self.nodes[-1][0] == self.nodes[-2][0]:
            (level, right), (_, left) = self.nodes.pop(), self.nodes.pop()
            merged = node_hash(left, right)
            self.nodes.append((level + 1, merged))
            closed.append((level + 1, self.size // (1 << (level + 1)) - 1, merged))
        return closed

    def root(self) -> bytes:
        """MTH of the whole log (RFC 9162 §2.1.1): fold the right edge from the right."""
        if not self.nodes:
            return EMPTY_ROOT
        root = self.nodes[-1][1]
        for _, left in reversed(self.nodes[:-1]):
            root = node_hash(left, root)
        return root


def sequence_pending(
    conn: Connection, *, limit: int, now: datetime, sign: CheckpointSigner, dequeue: bool = True
) -> list[int]:
    """Give up to ``limit`` unsequenced receipts their log index; checkpoint each log.

    Runs inside the caller's transaction. Returns the decision times (epoch ms) of
    the receipts sequenced, for lag metrics. ``dequeue=False`` leaves the placed
    receipts in ``log_pending``, for ``dequeue_placed`` to clear later: on SQLite with
    the log in a file of its own (``store.database.log_apart``), so that this
    transaction writes the log's file only and never takes the receipts' write lock.
    """
    sql = _POSTGRESQL if conn.dialect.name == "postgresql" else _SQLITE
    if sql is _POSTGRESQL:
        conn.exec_driver_sql(sql.lock, (SEQUENCER_LOCK,))
    pending = conn.exec_driver_sql(sql.pending, (limit,)).all()
    if not pending:
        return []
    # In order of first appearance, as the checkpoints are signed and stored.
    frontiers = _frontiers(conn, sql, list(dict.fromkeys(row[1] for row in pending)))
    sequenced_at = bound(log_leaves.c.sequenced_at, now, conn)
    leaves: list[tuple[Any, ...]] = []
    nodes: list[tuple[str, int, int, bytes]] = []
    computed = _leaves_of_stored(conn, sql, [row[0] for row in pending if row[2] is None])
    for execution_id, org_id, queued_leaf, _ in pending:
        frontier = frontiers[org_id]
        # The leaf the signer queued: the hash of the very bytes its signature covers.
        digest = bytes(queued_leaf) if queued_leaf is not None else computed[execution_id]
        leaves.append((org_id, frontier.size, execution_id, digest))
        nodes.extend((org_id, *closed) for closed in frontier.append(digest))
    dequeued = [(row[3], row[0]) for row in pending] if dequeue else []
    if sql is _POSTGRESQL:
        # One statement each, the rows as one array per column. psycopg's executemany
        # sends and waits row by row here: a system call per row, and the GIL handed
        # back and forth with the writer's loop (docs/performance.md, "The PostgreSQL
        # sequencer round").
        conn.exec_driver_sql(sql.insert_leaf, (sequenced_at, *as_columns(leaves)))
        if nodes:
            conn.exec_driver_sql(sql.insert_node, as_columns(nodes))
        if dequeued:
            conn.exec_driver_sql(sql.dequeue, as_columns(dequeued))
    else:  # SQLite's executemany loops in C, straight to the driver
        conn.exec_driver_sql(sql.insert_leaf, [(*leaf, sequenced_at) for leaf in leaves])
        if nodes:
            conn.exec_driver_sql(sql.insert_node, nodes)
        if dequeued:
            conn.exec_driver_sql(sql.dequeue, dequeued)
    created_at = bound(log_checkpoints.c.created_at, now, conn)
    checkpoints = []
    for org_id, frontier in frontiers.items():
        root = frontier.root()
        note = sign(org_id, frontier.size, root)
        checkpoints.append((org_id, frontier.size, root, note, created_at))
    conn.exec_driver_sql(sql.insert_checkpoint, checkpoints)
    return [row[3] for row in pending]


def _leaves_of_stored(
    conn: Connection, sql: _Statements, execution_ids: list[str]
) -> dict[str, bytes]:
    """The leaves of receipts queued without one (before migration 0013), computed from
    the stored receipts: the hash of their signed fields, as a verifier computes it."""
    if not execution_ids:
        return {}
    return {
        execution_id: leaf_hash(signing_payload(msgspec.json.decode(receipt)))
        for execution_id, receipt in conn.exec_driver_sql(
            sql.receipts, _list_parameter(sql, execution_ids)
        )
    }


def _list_parameter(sql: _Statements, values: list[str]) -> tuple[Any, ...]:
    """A list as the statement's one parameter: an array on PostgreSQL, JSON on SQLite."""
    return (values,) if sql is _POSTGRESQL else (json.dumps(values),)


@dataclass(frozen=True, slots=True)
class _Statements:
    """The sequencer's statements as SQL text, run through ``exec_driver_sql``.

    They run for every receipt sequenced; SQLAlchemy's Core spent more CPU on each
    execution (a cache-key walk, a parameter dict and type processing per row) than
    the database did. Written with SQLite's ``?``; ``in_format_style`` makes
    psycopg's ``%s`` of them.
    """

    # (limit,) -> (execution_id, org_id, leaf_hash or NULL, decided_at_ms), oldest first
    pending: str
    receipts: str  # (execution ids,) -> (execution_id, receipt)
    sizes: str  # the batch's orgs -> (org_id, largest log_index or NULL)
    edges: str  # the (org_id, level, index) wanted -> (org_id, level, hash or NULL)
    # Rows for executemany on SQLite; on PostgreSQL one list per column (and the leaves'
    # sequenced_at first, once).
    insert_leaf: str  # (org_id, log_index, execution_id, leaf_hash, sequenced_at)
    insert_node: str  # (org_id, level, node_index, hash)
    dequeue: str  # (decided_at_ms, execution_id) off log_pending, now placed
    insert_checkpoint: str
    lock: str = ""  # (lock id,): PostgreSQL's advisory lock for the transaction


# A batch's logs are looked up with their lists as one parameter (JSON on SQLite,
# arrays on PostgreSQL) in a CTE, o or w, that only the dialects write differently.
# Every correlated subquery is one primary-key search; max(log_index) too (the last
# entry of the org's part of the key). (S608: every piece is a constant.)
_SIZES = (
    " SELECT org_id, (SELECT max(log_index) FROM log_leaves AS l WHERE l.org_id = o.org_id) FROM o"
)
_EDGES = (
    " SELECT org_id, level, CASE level"
    " WHEN 0 THEN (SELECT leaf_hash FROM log_leaves AS l"
    " WHERE l.org_id = w.org_id AND l.log_index = w.node_index)"
    " ELSE (SELECT hash FROM log_nodes AS n"
    " WHERE n.org_id = w.org_id AND n.level = w.level AND n.node_index = w.node_index)"
    " END FROM w"
)

_SQLITE = _Statements(
    # log_pending's key is this order: the head of its index, no receipt read. With the log
    # in a file of its own, receipts placed stay queued until ``dequeue_placed``: each is
    # passed over with one search of log_leaves' unique index on execution_id.
    pending="SELECT execution_id, org_id, leaf_hash, decided_at_ms FROM log_pending AS p"
    " WHERE NOT EXISTS (SELECT 1 FROM log_leaves AS l WHERE l.execution_id = p.execution_id)"
    " ORDER BY decided_at_ms, execution_id LIMIT ?",
    receipts="SELECT execution_id, receipt FROM executions"
    " WHERE execution_id IN (SELECT value FROM json_each(?))",
    sizes="WITH o(org_id) AS (SELECT value FROM json_each(?))" + _SIZES,  # noqa: S608
    edges="WITH w(org_id, level, node_index) AS (SELECT json_extract(value, '$[0]'),"  # noqa: S608
    " json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?))" + _EDGES,
    insert_leaf="INSERT INTO log_leaves (org_id, log_index, execution_id, leaf_hash, sequenced_at)"
    " VALUES (?, ?, ?, ?, ?)",
    insert_node="INSERT INTO log_nodes (org_id, level, node_index, hash) VALUES (?, ?, ?, ?)",
    dequeue="DELETE FROM log_pending WHERE decided_at_ms = ? AND execution_id = ?",
    insert_checkpoint="INSERT INTO log_checkpoints (org_id, tree_size, root_hash, note, created_at)"
    " VALUES (?, ?, ?, ?, ?)",
)
_POSTGRESQL = in_format_style(
    _SQLITE,
    lock="SELECT pg_advisory_xact_lock(%s)",
    # Dequeued in the transaction that places them: whatever is queued is unplaced.
    pending="SELECT execution_id, org_id, leaf_hash, decided_at_ms FROM log_pending"
    " ORDER BY decided_at_ms, execution_id LIMIT %s",
    receipts="SELECT execution_id, receipt FROM executions WHERE execution_id = ANY(%s::varchar[])",
    # The arrays in binary (%b): in text, psycopg would quote each element in Python.
    insert_leaf="INSERT INTO log_leaves (org_id, log_index, execution_id, leaf_hash, sequenced_at)"
    " SELECT o, i, e, h, %s FROM unnest(%b::varchar[], %b::bigint[], %b::varchar[], %b::bytea[])"
    " AS l(o, i, e, h)",
    insert_node="INSERT INTO log_nodes (org_id, level, node_index, hash)"
    " SELECT * FROM unnest(%b::varchar[], %b::integer[], %b::bigint[], %b::bytea[])",
    dequeue="DELETE FROM log_pending AS p USING unnest(%b::bigint[], %b::varchar[]) AS d(t, e)"
    " WHERE p.decided_at_ms = d.t AND p.execution_id = d.e",
    sizes="WITH o(org_id) AS (SELECT * FROM unnest(%s::varchar[]))" + _SIZES,  # noqa: S608
    edges="WITH w(org_id, level, node_index) AS"  # noqa: S608
    " (SELECT * FROM unnest(%s::varchar[], %s::integer[], %s::bigint[]))" + _EDGES,
)


def _frontiers(conn: Connection, sql: _Statements, org_ids: list[str]) -> dict[str, _Frontier]:
    """The right edge of each of these logs, in two statements whatever their number."""
    postgres = sql is _POSTGRESQL
    found = conn.exec_driver_sql(sql.sizes, _list_parameter(sql, org_ids))
    sizes = {org_id: 0 if largest is None else int(largest) + 1 for org_id, largest in found}
    # A log of size n ends in one complete subtree per bit set in n, largest first.
    edges: dict[str, list[tuple[int, int]]] = {}  # org_id -> (level, index) of each
    for org_id in org_ids:
        size, start, edge = sizes[org_id], 0, edges.setdefault(org_id, [])
        for level in range(size.bit_length() - 1, -1, -1):
            if size & (1 << level):
                edge.append((level, start >> level))
                start += 1 << level
    wanted = [(org_id, level, index) for org_id, edge in edges.items() for level, index in edge]
    hashes: dict[tuple[str, int], bytes | None] = {}
    if wanted:
        if postgres:
            found = conn.exec_driver_sql(sql.edges, as_columns(wanted))
        else:
            found = conn.exec_driver_sql(sql.edges, (json.dumps(wanted),))
        hashes = {(org_id, level): digest for org_id, level, digest in found}
    frontiers = {}
    for org_id, edge in edges.items():
        nodes = []
        for level, index in edge:
            digest = hashes.get((org_id, level))
            if digest is None:
                raise LookupError(f"log {org_id}: no node at level {level}, index {index}")
            nodes.append((level, bytes(digest)))
        frontiers[org_id] = _Frontier(sizes[org_id], nodes)
    return frontiers


@dataclass(frozen=True, slots=True)
class DecidedSpan:
    """The log indexes [first, end) holding a time range's sequenced receipts (first ==
    end: none), and how many of the range are not sequenced under the size asked."""

    first: int
    end: int
    pending: int


def _decided_in(
    org_id: str, since: datetime | None, until: datetime | None
) -> list[ColumnElement[bool]]:
    where = [executions.c.org_id == org_id]
    if since is not None:
        where.append(executions.c.decided_at_ms >= epoch_millis(since))
    if until is not None:
        where.append(executions.c.decided_at_ms < epoch_millis(until))
    return where


def _log_span(org_id: str, start: int, end: int) -> list[ColumnElement[bool]]:
    """The leaves of ``org_id``'s log at indexes [start, end)."""
    return [
        log_leaves.c.org_id == org_id,
        log_leaves.c.log_index >= start,
        log_leaves.c.log_index < end,
    ]


def dequeue_placed(conn: Connection) -> int:
    """Delete from ``log_pending`` every receipt that has its leaf (in the caller's
    transaction). Only placed receipts go: one crash after the other leaves them
    queued, and they are passed over and deleted next time."""
    deleted = conn.exec_driver_sql(_DEQUEUE_PLACED)
    return int(deleted.rowcount)


_DEQUEUE_PLACED = (
    "DELETE FROM log_pending WHERE EXISTS"
    " (SELECT 1 FROM log_leaves AS l WHERE l.execution_id = log_pending.execution_id)"
)


_AHEAD_OF_RECEIPTS = (
    "SELECT o.org_id FROM orgs AS o JOIN log_leaves AS l ON l.org_id = o.org_id"
    " AND l.log_index = (SELECT max(log_index) FROM log_leaves AS m WHERE m.org_id = o.org_id)"
    " WHERE NOT EXISTS (SELECT 1 FROM executions AS e WHERE e.execution_id = l.execution_id)"
)


class LogStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._writer_lock = WriterLock.for_engine(engine)

    # --- sequencing ------------------------------------------------------------
    def sequence_batch(
        self, *, limit: int, now: datetime, sign: CheckpointSigner, dequeue: bool = True
    ) -> list[int]:
        """``sequence_pending`` in a transaction of its own (the sequencer's thread or
        process: PostgreSQL, or SQLite with the log apart)."""
        with self.engine.begin() as conn:
            return sequence_pending(conn, limit=limit, now=now, sign=sign, dequeue=dequeue)

    def dequeue_placed(self) -> int:
        """Clear the receipts already placed off ``log_pending`` (SQLite, log apart);
        how many. Its own transaction on the receipts' file, with the receipt writer's
        lock: one short write a second instead of one per pass."""
        with self._writer_lock.held(), self.engine.begin() as conn:
            return dequeue_placed(conn)

    def logs_ahead_of_receipts(self) -> list[str]:
        """The orgs whose log ends in a receipt the database does not hold: the log's file
        is newer than the receipts' (SQLite, one restored without the other). One index
        search per org: the last leaf, then its receipt."""
        with self.engine.connect() as conn:
            return list(conn.exec_driver_sql(_AHEAD_OF_RECEIPTS).scalars())

    # --- reads -----------------------------------------------------------------
    def latest_checkpoint(self, org_id: str) -> StoredCheckpoint | None:
        query = (
            select(log_checkpoints)
            .where(log_checkpoints.c.org_id == org_id)
            .order_by(log_checkpoints.c.tree_size.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return _checkpoint(row) if row is not None else None

    def position(self, org_id: str, execution_id: str) -> LeafPosition | None:
        query = select(log_leaves.c.log_index, log_leaves.c.leaf_hash).where(
            log_leaves.c.org_id == org_id, log_leaves.c.execution_id == execution_id
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return LeafPosition(row[0], bytes(row[1])) if row is not None else None

    def leaf_hashes(self, org_id: str, size: int, *, start: int = 0) -> list[bytes]:
        """The leaf hashes of the log's [start, size), in log order."""
        query = (
            select(log_leaves.c.leaf_hash)
            .where(*_log_span(org_id, start, size))
            .order_by(log_leaves.c.log_index)
        )
        with self.engine.connect() as conn:
            return [bytes(h) for h in conn.execute(query).scalars()]

    def decided_span(
        self, org_id: str, since: datetime | None, until: datetime | None, size: int
    ) -> DecidedSpan:
        """Where the receipts decided in [since, until) lie in a log of ``size`` leaves."""
        in_range = _decided_in(org_id, since, until)
        placed = log_leaves.c.execution_id == executions.c.execution_id
        index = log_leaves.c.log_index
        with self.engine.connect() as conn:
            first, last = conn.execute(
                select(func.min(index), func.max(index))
                .select_from(executions.join(log_leaves, placed))
                .where(*in_range, index < size)
            ).one()
            pending = conn.execute(
                select(func.count())
                .select_from(executions.outerjoin(log_leaves, placed))
                .where(*in_range, or_(index.is_(None), index >= size))
            ).scalar_one()
        if first is None:
            return DecidedSpan(0, 0, int(pending))
        return DecidedSpan(int(first), int(last) + 1, int(pending))

    def sequenced_receipts(self, org_id: str, start: int, end: int) -> list[tuple[int, bytes]]:
        """(log index, stored receipt bytes) of the log's [start, end), in log order."""
        query = (
            select(log_leaves.c.log_index, executions.c.receipt)
            .join(executions, executions.c.execution_id == log_leaves.c.execution_id)
            .where(*_log_span(org_id, start, end))
            .order_by(log_leaves.c.log_index)
        )
        with self.engine.connect() as conn:
            return [(int(index), bytes(receipt)) for index, receipt in conn.execute(query)]

    def subtree_roots(self, org_id: str) -> SubtreeReader:
        return SubtreeReader(self.engine, org_id)

    def inclusion_path(self, org_id: str, index: int, size: int) -> list[bytes]:
        """RFC 9162 inclusion proof, its stored nodes fetched in two queries."""
        return _with_prefetch(
            lambda roots: inclusion_proof(index, size, roots), self.subtree_roots(org_id)
        )

    def consistency_path(self, org_id: str, first: int, second: int) -> list[bytes]:
        """RFC 9162 consistency proof, its stored nodes fetched in two queries."""
        return _with_prefetch(
            lambda roots: consistency_proof(first, second, roots), self.subtree_roots(org_id)
        )


class SubtreeReader:
    """MTH(D[start:end]) from stored nodes: each complete aligned part is one lookup."""

    def __init__(self, engine: Engine, org_id: str) -> None:
        self._engine = engine
        self._org_id = org_id
        self._memo: dict[tuple[int, int], bytes] = {}

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        """Load every stored node ``ranges`` decompose into, in one query per table."""
        wanted = {part for start, end in ranges for part in _complete_parts(start, end)}
        wanted -= self._memo.keys()
        leaves = [index for level, index in wanted if level == 0]
        nodes = [(level, index) for level, index in wanted if level > 0]
        with self._engine.connect() as conn:
            if leaves:
                for index, digest in conn.execute(
                    select(log_leaves.c.log_index, log_leaves.c.leaf_hash).where(
                        log_leaves.c.org_id == self._org_id, log_leaves.c.log_index.in_(leaves)
                    )
                ):
                    self._memo[(0, index)] = bytes(digest)
            if nodes:
                by_level: dict[int, list[int]] = {}
                for level, index in nodes:
                    by_level.setdefault(level, []).append(index)
                # One "org_id = ? AND level = ? AND node_index IN (...)" query per level,
                # joined by UNION ALL: SQLite searches the whole primary key for each. A
                # row-value IN over (level, node_index), or an OR of per-level terms, made
                # it search by org_id only and read every node of the org's log.
                per_level = [
                    select(log_nodes.c.level, log_nodes.c.node_index, log_nodes.c.hash).where(
                        log_nodes.c.org_id == self._org_id,
                        log_nodes.c.level == level,
                        log_nodes.c.node_index.in_(ids),
                    )
                    for level, ids in by_level.items()
                ]
                for level, index, digest in conn.execute(union_all(*per_level)):
                    self._memo[(level, index)] = bytes(digest)

    def __call__(self, start: int, end: int) -> bytes:
        size = end - start
        if size <= 0:
            raise ValueError("empty subtree")
        if size & (size - 1) == 0 and start % size == 0:
            level = size.bit_length() - 1
            key = (level, start >> level)
            if key not in self._memo:
                with self._engine.connect() as conn:
                    self._memo[key] = _node(conn, self._org_id, *key)
            return self._memo[key]
        split = 1 << ((size - 1).bit_length() - 1)  # largest power of two < size
        return node_hash(self(start, start + split), self(start + split, end))


def _complete_parts(start: int, end: int) -> list[tuple[int, int]]:
    """The complete aligned subtrees (level, index) that MTH(D[start:end]) is built from."""
    size = end - start
    if size & (size - 1) == 0 and start % size == 0:
        level = size.bit_length() - 1
        return [(level, start >> level)]
    split = 1 << ((size - 1).bit_length() - 1)
    return _complete_parts(start, start + split) + _complete_parts(start + split, end)


def _with_prefetch(
    proof: Callable[[Callable[[int, int], bytes]], list[bytes]], reader: SubtreeReader
) -> list[bytes]:
    """Run ``proof`` once to learn which subtrees it needs, fetch them together, run it again.

    Proof generation is deterministic in the ranges it asks for, so the first,
    hash-free pass names exactly the nodes the second pass will read.
    """
    asked: list[tuple[int, int]] = []

    def record(start: int, end: int) -> bytes:
        asked.append((start, end))
        return bytes(32)

    proof(record)
    reader.prefetch(asked)
    return proof(reader)


def _tree_size(conn: Connection, org_id: str) -> int:
    largest = conn.execute(
        select(func.max(log_leaves.c.log_index)).where(log_leaves.c.org_id == org_id)
    ).scalar_one_or_none()
    return 0 if largest is None else int(largest) + 1


def _node(conn: Connection, org_id: str, level: int, index: int) -> bytes:
    if level == 0:
        query: Any = select(log_leaves.c.leaf_hash).where(
            log_leaves.c.org_id == org_id, log_leaves.c.log_index == index
        )
    else:
        query = select(log_nodes.c.hash).where(
            log_nodes.c.org_id == org_id,
            log_nodes.c.level == level,
            log_nodes.c.node_index == index,
        )
    value = conn.execute(query).scalar_one_or_none()
    if value is None:
        raise LookupError(f"log {org_id}: no node at level {level}, index {index}")
    return bytes(value)


def _checkpoint(row: Any) -> StoredCheckpoint:
    return StoredCheckpoint(
        row["org_id"], row["tree_size"], bytes(row["root_hash"]), row["note"], row["created_at"]
    )
