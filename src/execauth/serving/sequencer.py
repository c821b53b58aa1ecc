"""The sequencer: puts committed receipts into their organization's Merkle log.

It never runs on the request path: a receipt is answered once
durable, and sequenced within about a second after. Every instance runs one;
the store makes sure only one works at a time. On PostgreSQL it is a thread of
its own; on SQLite it runs between receipt batches where the writer commits (its
thread, or the writer process's loop), because SQLite has a single write lock and a
second writer would stall the first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import urlsplit

from sqlalchemy import Connection

from execauth.keyring import Keyring
from execauth.ledger.checkpoint import Checkpoint, sign_checkpoint
from execauth.observability.metrics import Metrics
from execauth.serving.receipt_writer import ReceiptWriter
from execauth.store.ledger import LogStore, sequence_pending

log = logging.getLogger("execauth.sequencer")
BATCH = 2_000
# Between receipt batches on SQLite's single writer: small, so receipts never wait long.
WRITER_BATCH = 256


def log_origin(issuer: str, org_id: str) -> str:
    """``<issuer host>/log/<org_id>`` (docs/ledger.md): names the log in its checkpoints."""
    return f"{urlsplit(issuer).netloc or issuer}/log/{org_id}"


class Sequencer:
    def __init__(
        self,
        store: LogStore,
        keyring: Keyring,
        issuer: str,
        *,
        interval_seconds: float,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        metrics: Metrics | None = None,
    ) -> None:
        self._metrics = metrics
        self._store = store
        self._keyring = keyring
        self._issuer = issuer
        self._interval = interval_seconds
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, writer: ReceiptWriter) -> None:
        """Sequence where the writer commits for SQLite (one write lock), else on our own."""
        if writer.engine.dialect.name == "sqlite":
            writer.run_in_background(self._step_on, self._interval, on_done=self._timed)
            return
        self._thread = threading.Thread(target=self._run, name="execauth-sequencer", daemon=True)
        self._thread.start()

    def _step_on(self, conn: Connection) -> bool:
        """One bounded step where the writer commits; ``True`` when receipts are still pending."""
        now = self._clock()
        decided = sequence_pending(conn, limit=WRITER_BATCH, now=now, sign=self._sign)
        self._observe(now, decided)
        return len(decided) == WRITER_BATCH

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def run_once(self) -> int:
        """Sequence everything pending now (in batches); how many receipts were added."""
        total = 0
        while True:
            now = self._clock()
            started = time.perf_counter()
            decided = self._store.sequence_batch(limit=BATCH, now=now, sign=self._sign)
            self._timed(time.perf_counter() - started)
            total += len(decided)
            self._observe(now, decided)
            if len(decided) < BATCH:
                return total

    def _timed(self, seconds: float) -> None:
        """One sequencing transaction took ``seconds``, its commit included."""
        if self._metrics is not None:
            self._metrics.observe_sequencer_transaction(seconds)

    def _observe(self, now: datetime, decided: list[int]) -> None:
        if decided and self._metrics is not None:
            self._metrics.observe_sequenced(len(decided), now.timestamp() - min(decided) / 1000)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.run_once()
            except Exception:
                # A failed batch rolled back whole; the next round retries the same rows.
                log.exception("sequencing failed; will retry")

    def _sign(self, org_id: str, tree_size: int, root_hash: bytes) -> str:
        signer = self._keyring.signer(self._clock())
        public_key = self._keyring.public_key(signer.key_id)
        origin = log_origin(self._issuer, org_id)
        return sign_checkpoint(
            Checkpoint(origin, tree_size, root_hash), [(origin, public_key, signer.sign)]
        )
