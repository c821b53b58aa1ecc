"""``sequence_pending`` straight on the store: many logs, batches of every shape.

A batch picks each of its logs up where the last one left it (the log's right edge,
read back from the stored leaves and nodes), so the logs below are sequenced in
batches of sizes that end them at every kind of edge: a power of two, an odd size
that ends in a lone leaf, sizes with many set bits. Leaves, stored subtrees and
checkpoints are checked against RFC 9162 written out independently in
tests/store/test_ledger.py.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime

import msgspec
import pytest
from sqlalchemy import Engine, select

from execauth.store.control import ControlStore
from execauth.store.database import make_engine, upgrade
from execauth.store.execution_writes import insert_batch, insert_execution
from execauth.store.executions import ExecutionRecord
from execauth.store.ledger import sequence_pending
from execauth.store.tables import executions, log_checkpoints, log_leaves, log_nodes, log_pending
from execauth.tenancy.audit import AuditEvent
from execauth.tenancy.orgs import Org
from tests.conftest import Database
from tests.store.test_ledger import leaf, mth

NOW = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
ORGS = [f"org_01log{i}" for i in range(5)]


def create_orgs(engine: Engine) -> None:
    control = ControlStore(engine)
    for org_id in ORGS:
        control.create_org(
            Org(org_id, "Logs", "free", "a", NOW),
            AuditEvent(org_id, NOW, "test", "org.created", org_id),
        )


@pytest.fixture
def engine(database: Database) -> Iterator[Engine]:
    engine = make_engine(database.url, schema=database.schema)
    upgrade(engine)
    create_orgs(engine)
    yield engine
    engine.dispose()


class Receipts:
    """Stores executions with small signed-looking receipts, in decision order."""

    def __init__(self, engine: Engine, *, first: int = 0) -> None:
        self.engine = engine
        self.count = first  # the number before the first receipt's
        self.by_org: dict[str, list[dict[str, object]]] = {org_id: [] for org_id in ORGS}

    def store(self, org_ids: list[str]) -> None:
        with self.engine.begin() as conn:
            insert_batch(conn, [(r, None) for r in self.records(org_ids)])

    def records(self, org_ids: list[str]) -> list[ExecutionRecord]:
        """The next receipts of these orgs, in this order, as the gateway would store them."""
        records = []
        for org_id in org_ids:
            n = self.count = self.count + 1
            receipt = {
                "receipt_id": f"service_rcpt_{n:016x}",
                "org_id": org_id,
                "n": n,
                "message": "é ✓ \U0001f600",  # non-ASCII: the payload is JCS, not ASCII JSON
                "signature": f"ed25519:{n}",  # unsigned fields are not in the leaf
                "receiptHash": f"sha256:{n}",
            }
            self.by_org[org_id].append(receipt)
            records.append(
                ExecutionRecord(
                    execution_id=f"service_exec_{n:026d}",
                    receipt_id=f"service_rcpt_{n:016x}",
                    org_id=org_id,
                    idempotency_key=None,
                    request_digest="sha256:" + "0" * 64,
                    surface="deploy.production",
                    actor=None,
                    decision="PERMIT",
                    policy_id="deploys",
                    policy_version=1,
                    rule_id=None,
                    reason=None,
                    decided_at_ms=1_795_000_000_000 + n,
                    evaluation_input="{}",
                    receipt=msgspec.json.encode(receipt),
                    leaf_hash=leaf(receipt),  # as the gateway that signed it computes it
                )
            )
        return records


def notes(org_id: str, size: int, root: bytes) -> str:
    return f"{org_id}\n{size}\n{base64.b64encode(root).decode()}\n"


def sequence(engine: Engine, limit: int) -> list[int]:
    with engine.begin() as conn:
        return sequence_pending(conn, limit=limit, now=NOW, sign=notes)


def assert_logs_are_rfc9162(engine: Engine, receipts: Receipts) -> None:
    with engine.connect() as conn:
        for org_id in ORGS:
            expected = [leaf(r) for r in receipts.by_org[org_id]]
            stored = [
                (index, bytes(digest))
                for index, digest in conn.execute(
                    select(log_leaves.c.log_index, log_leaves.c.leaf_hash)
                    .where(log_leaves.c.org_id == org_id)
                    .order_by(log_leaves.c.log_index)
                )
            ]
            size = len(stored)
            assert stored == list(enumerate(expected[:size]))
            nodes = {
                (level, index): bytes(digest)
                for level, index, digest in conn.execute(
                    select(log_nodes.c.level, log_nodes.c.node_index, log_nodes.c.hash).where(
                        log_nodes.c.org_id == org_id
                    )
                )
            }
            # Every complete aligned subtree of the log, and nothing else.
            assert nodes == {
                (level, index): mth(expected[index << level : (index + 1) << level])
                for level in range(1, size.bit_length())
                for index in range(size >> level)
            }
            for tree_size, root, note in conn.execute(
                select(
                    log_checkpoints.c.tree_size, log_checkpoints.c.root_hash, log_checkpoints.c.note
                ).where(log_checkpoints.c.org_id == org_id)
            ):
                assert bytes(root) == mth(expected[:tree_size])
                assert note == notes(org_id, tree_size, mth(expected[:tree_size]))


def test_batches_of_many_logs_extend_each_log_exactly_as_rfc9162_builds_it(
    engine: Engine,
) -> None:
    receipts = Receipts(engine)
    # Org i gets a share of each round that differs from the others', so the logs reach
    # sizes with every shape of right edge, each batch continuing from the last one's.
    rounds = [[1, 2, 3, 4, 5], [1, 1, 2, 3, 8], [2, 3, 0, 9, 1], [4, 0, 7, 1, 16], [7, 9, 5, 2, 3]]
    for shares in rounds:
        order = [org for org, share in zip(ORGS, shares, strict=True) for _ in range(share)]
        receipts.store(order[::2] + order[1::2])  # interleaved: one batch, several logs
        while sequence(engine, limit=6):
            assert_logs_are_rfc9162(engine, receipts)
    assert_logs_are_rfc9162(engine, receipts)
    with engine.connect() as conn:
        assert conn.execute(select(log_pending)).first() is None


def test_receipts_are_sequenced_oldest_first_and_report_their_decision_times(
    engine: Engine,
) -> None:
    receipts = Receipts(engine)
    receipts.store([ORGS[0], ORGS[1], ORGS[0]])
    assert sequence(engine, limit=2) == [1_795_000_000_001, 1_795_000_000_002]
    assert sequence(engine, limit=2) == [1_795_000_000_003]
    assert sequence(engine, limit=2) == []
    with engine.connect() as conn:
        indexes = conn.execute(
            select(executions.c.org_id, log_leaves.c.log_index)
            .join(log_leaves, log_leaves.c.execution_id == executions.c.execution_id)
            .order_by(executions.c.decided_at_ms)
        ).all()
    assert [tuple(row) for row in indexes] == [(ORGS[0], 0), (ORGS[1], 0), (ORGS[0], 1)]
    assert_logs_are_rfc9162(engine, receipts)


def test_a_receipt_queued_without_its_leaf_is_placed_with_the_leaf_of_its_stored_bytes(
    engine: Engine,
) -> None:
    # Receipts queued before migration 0013 carry no leaf; the sequencer reads theirs.
    receipts = Receipts(engine)
    with engine.begin() as conn:
        records = receipts.records([ORGS[0], ORGS[1], ORGS[0]])
        unleaved = [dataclasses.replace(r, leaf_hash=None) for r in records[:2]]
        insert_batch(conn, [(r, None) for r in [*unleaved, records[2]]])
    assert len(sequence(engine, limit=10)) == 3
    assert_logs_are_rfc9162(engine, receipts)


def test_every_stored_receipt_is_queued_once_and_a_repeat_is_not(engine: Engine) -> None:
    receipts = Receipts(engine)
    alone, keyed, first, again, other = receipts.records([ORGS[0]] * 5)
    keyed, first = (
        dataclasses.replace(r, idempotency_key=f"k-{r.receipt_id}") for r in (keyed, first)
    )
    again = dataclasses.replace(again, idempotency_key=first.idempotency_key)
    with engine.begin() as conn:
        assert insert_execution(conn, alone) is None  # no key
        assert insert_execution(conn, keyed) is None  # a new key
        outcomes = insert_batch(conn, [(first, None), (again, None), (other, None)])
        assert [outcome is None for outcome in outcomes] == [True, False, True]
        assert insert_execution(conn, again) is not None  # the key is taken: a repeat
    with engine.connect() as conn:
        queued = conn.execute(select(log_pending.c.execution_id, log_pending.c.leaf_hash)).all()
    # Each with the leaf its record carried: on PostgreSQL the batch's statement pairs them.
    assert sorted((e, bytes(h)) for e, h in queued) == sorted(
        (r.execution_id, r.leaf_hash) for r in (alone, keyed, first, other)
    )
