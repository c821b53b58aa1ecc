"""Inclusion proofs for logs of 10^3 to 10^7 leaves.

In memory (``ledger.merkle``): ``subtree_roots(leaves)`` memoizes every aligned complete
subtree, so the first proof over a log hashes it whole (cold) and later proofs reuse
those nodes (warm). From SQLite (``store.ledger.LogStore``): the stored nodes of a
10^5-leaf log, two indexed queries per proof. The 10^7 cases peak at 2.9 GB resident
(leaf hashes and memoized nodes) and take about 30 s to build; the cold one runs once.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, insert

from execauth.ledger.merkle import (
    inclusion_proof,
    leaf_hash,
    merkle_root,
    subtree_roots,
    verify_inclusion,
)
from execauth.store.database import make_engine, upgrade
from execauth.store.ledger import LogStore, _Frontier
from execauth.store.tables import log_leaves, log_nodes

SIZES = [10**3, 10**4, 10**5, 10**6, 10**7]
_leaves: dict[int, list[bytes]] = {}


def leaves(size: int) -> list[bytes]:
    if size not in _leaves:
        _leaves[size] = [leaf_hash(i.to_bytes(8, "big")) for i in range(size)]
    return _leaves[size]


@pytest.mark.parametrize("size", SIZES)
def test_inclusion_proof_warm(benchmark: Any, size: int) -> None:
    """A proof for a random leaf once the tree's aligned nodes are memoized."""
    hashes = leaves(size)
    roots = subtree_roots(hashes)
    root = roots(0, size)  # fills the memo
    rng = random.Random(size)
    path = benchmark(lambda: inclusion_proof(rng.randrange(size), size, roots))
    assert len(path) <= size.bit_length()
    index = size // 3
    verify_inclusion(index, size, hashes[index], inclusion_proof(index, size, roots), root)


@pytest.mark.parametrize("size", SIZES)
def test_inclusion_proof_cold(benchmark: Any, size: int) -> None:
    """A first proof over leaves held in memory: hashes the whole tree, O(n)."""
    hashes = leaves(size)
    rounds = 1 if size >= 10**7 else 3 if size >= 10**6 else 10
    benchmark.pedantic(
        lambda: inclusion_proof(size // 3, size, subtree_roots(hashes)), rounds=rounds, iterations=1
    )


STORED = 10**5
ORG = "org_01bench"


@pytest.fixture(scope="module")
def stored_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, bytes]]:
    """A 10^5-leaf log written as the sequencer writes it (leaves + complete subtree nodes)."""
    path: Path = tmp_path_factory.mktemp("ledger") / "ledger.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    hashes = leaves(STORED)
    frontier = _Frontier(0, [])
    now = datetime(2026, 11, 23, tzinfo=UTC)
    leaf_rows: list[dict[str, Any]] = []
    node_rows: list[dict[str, Any]] = []
    for index, digest in enumerate(hashes):
        leaf_rows.append(
            {
                "org_id": ORG,
                "log_index": index,
                "execution_id": f"e{index}",
                "leaf_hash": digest,
                "sequenced_at": now,
            }
        )
        node_rows.extend(
            {"org_id": ORG, "level": level, "node_index": node_index, "hash": node}
            for level, node_index, node in frontier.append(digest)
        )
    with engine.begin() as conn:
        conn.execute(insert(log_leaves), leaf_rows)
        conn.execute(insert(log_nodes), node_rows)
    yield engine, merkle_root(hashes)
    engine.dispose()


def test_inclusion_proof_sqlite_100k(benchmark: Any, stored_log: tuple[Engine, bytes]) -> None:
    """``LogStore.inclusion_path`` for a random leaf of a stored 10^5-leaf log."""
    engine, root = stored_log
    store = LogStore(engine)
    rng = random.Random(1)
    benchmark(lambda: store.inclusion_path(ORG, rng.randrange(STORED), STORED))
    hashes = leaves(STORED)
    index = 77_777
    path = store.inclusion_path(ORG, index, STORED)
    verify_inclusion(index, STORED, hashes[index], path, root)  # raises if wrong
