"""The sequencer: puts committed receipts into their organization's Merkle log.

It never runs on the request path: a receipt is answered once
durable, and sequenced within about a second after. Every instance runs one;
the store makes sure only one works at a time. It is a loop of its own: a thread of a
single-process server, or of the process that commits under ``serve --workers N``
(PostgreSQL); on a SQLite database file under ``serve --workers N``, a process of its
own (``serving/log_keeper.py``).

On SQLite the logs are in a file of their own (``store.database.log_file_of``): a pass
writes that file only, never the receipts' file, whose write lock every receipt batch
needs. The receipts it placed stay queued in ``log_pending`` (passed over), and are
cleared off in one short write to the receipts' file about once a second.
(A SQLite database in memory or named by a ``file:`` URI keeps the logs in its one
file; there a pass waits for the writer's lock like any second writer.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import urlsplit

from execauth.keyring import Keyring
from execauth.ledger.checkpoint import Checkpoint, sign_checkpoint
from execauth.observability.metrics import Metrics
from execauth.store.database import log_apart
from execauth.store.ledger import LogStore

log = logging.getLogger("execauth.sequencer")
BATCH = 2_000
# With the log apart, how often the placed receipts are cleared off the queue: each
# clearing is a write to the receipts' file, which the receipt writer waits for.
DEQUEUE_INTERVAL_SECONDS = 1.0


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
        self._log_apart = log_apart(store.engine)
        self._last_dequeue = time.monotonic()

    def start(self) -> None:
        """Sequence on a thread of our own (``stop`` ends it)."""
        self._thread = threading.Thread(target=self.run, name="execauth-sequencer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def run_once(self) -> int:
        """Sequence everything pending now (in batches), and clear it off the queue; how
        many receipts were added."""
        total = self._place_pending()
        if self._log_apart:
            self._dequeue()
        return total

    def _place_pending(self) -> int:
        total = 0
        while True:
            now = self._clock()
            started = time.perf_counter()
            decided = self._store.sequence_batch(
                limit=BATCH, now=now, sign=self._sign, dequeue=not self._log_apart
            )
            self._timed(time.perf_counter() - started)
            total += len(decided)
            self._observe(now, decided)
            if len(decided) < BATCH:
                return total

    def _round(self) -> None:
        """One round of the loop: place what is pending; clear the queue about once a
        second (log apart), where ``run_once`` clears it every time."""
        self._place_pending()
        if self._log_apart and time.monotonic() - self._last_dequeue >= DEQUEUE_INTERVAL_SECONDS:
            self._dequeue()

    def _dequeue(self) -> None:
        self._store.dequeue_placed()
        self._last_dequeue = time.monotonic()

    def _timed(self, seconds: float) -> None:
        """One sequencing transaction took ``seconds``, its commit included."""
        if self._metrics is not None:
            self._metrics.observe_sequencer_transaction(seconds)

    def _observe(self, now: datetime, decided: list[int]) -> None:
        if decided and self._metrics is not None:
            self._metrics.observe_sequenced(len(decided), now.timestamp() - min(decided) / 1000)

    def run(self) -> None:
        """Sequence every interval until ``stop`` (the thread's, or the log keeper
        process's, main loop)."""
        while not self._stop.wait(self._interval):
            try:
                self._round()
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
