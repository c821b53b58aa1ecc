"""The sequencer's cost per receipt: ``store.ledger.sequence_pending`` on SQLite and PostgreSQL.

Each round first stores ``batch`` fresh executions (untimed), signed receipts of the
usual size spread over ``orgs`` organizations, then times one ``sequence_pending``
transaction that appends them all to their logs and signs one checkpoint per log,
as the sequencer does (``WRITER_BATCH`` = 256 between receipt batches on SQLite,
``BATCH`` = 2,000 on PostgreSQL). ``cpu_per_receipt_us`` is the CPU time of the
timed thread per receipt, the share of the interpreter it takes from the writer.
The logs grow from round to round, as real ones do.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from sqlalchemy import Engine

from execauth.keyring import ActiveSigner
from execauth.ledger.checkpoint import Checkpoint, sign_checkpoint
from execauth.ledger.merkle import leaf_hash
from execauth.policy.decision import Decision, Outcome, PolicyRef
from execauth.receipts import build_receipt, sign_receipt
from execauth.request import parse_execute_request
from execauth.store.execution_writes import insert_batch
from execauth.store.executions import ExecutionRecord
from execauth.store.ledger import sequence_pending

from .conftest import BODY, NOW
from .test_bench_writer import BACKENDS, bench_database, record

ORGS = [f"org_01bench{i:02d}" for i in range(16)]
POLICY = PolicyRef("bench", 1, "sha256:" + "ab" * 32)
PERMIT = Decision(Outcome.PERMIT, "release-from-main", None, None, 600)
PRIVATE_KEY = Ed25519PrivateKey.generate()
SIGNER = ActiveSigner("service_key_0123456789abcdef", PRIVATE_KEY)
PUBLIC_KEY = PRIVATE_KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
REQUEST = parse_execute_request(BODY, "bench-1")


@pytest.fixture(scope="module", params=BACKENDS)
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    with bench_database(request.param, tmp_path_factory.mktemp("sequencer"), ORGS) as engine:
        yield engine


def signed_record(org_id: str) -> ExecutionRecord:
    """An execution whose receipt is a real signed one (~1 KB), as the gateway stores it."""
    draft = record(org_id)
    unsigned = build_receipt(
        receipt_id=draft.receipt_id,
        execution_id=draft.execution_id,
        request=REQUEST,
        decision=PERMIT,
        policy=POLICY,
        org_id=org_id,
        issuer="http://127.0.0.1:8080",
        now=NOW,
        key_id=SIGNER.key_id,
    )
    signed, payload = sign_receipt(unsigned, SIGNER)
    # With its leaf, as the gateway queues it (migration 0013).
    return dataclasses.replace(
        draft, receipt=msgspec.json.encode(signed), leaf_hash=leaf_hash(payload)
    )


def sign(org_id: str, tree_size: int, root_hash: bytes) -> str:
    """A real checkpoint signature, as the sequencer makes one per log and batch."""
    origin = f"127.0.0.1:8080/log/{org_id}"
    checkpoint = Checkpoint(origin, tree_size, root_hash)
    return sign_checkpoint(checkpoint, [(origin, PUBLIC_KEY, SIGNER.sign)])


@pytest.mark.parametrize(("batch", "orgs"), [(1, 1), (8, 1), (256, 1), (256, 16), (2000, 1)])
def test_sequence_pending(benchmark: Any, engine: Engine, batch: int, orgs: int) -> None:
    cpu: list[float] = []

    def setup() -> tuple[tuple[()], dict[str, Any]]:
        records = [signed_record(ORGS[i % orgs]) for i in range(batch)]
        with engine.begin() as conn:
            insert_batch(conn, [(r, None) for r in records])
        return (), {}

    def sequence() -> None:
        started = time.thread_time()
        with engine.begin() as conn:
            decided = sequence_pending(conn, limit=batch, now=NOW, sign=sign)
        cpu.append(time.thread_time() - started)
        assert len(decided) == batch

    benchmark.pedantic(sequence, setup=setup, rounds=30 if batch < 2000 else 10, warmup_rounds=1)
    benchmark.extra_info["per_receipt_us"] = benchmark.stats.stats.median / batch * 1e6
    cpu.sort()
    benchmark.extra_info["cpu_per_receipt_us"] = cpu[len(cpu) // 2] / batch * 1e6
