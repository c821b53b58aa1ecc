"""The log keeper process of ``execauth serve --workers N`` on a SQLite database file.

With the Merkle logs in a file of their own (``store.database.log_file_of``), placing
receipts no longer needs the receipts' write lock, so it no longer has to run where the
receipt writer commits. It runs here, in a process of its own, started and watched by
the writer process: the sequencer's CPU (about 4 ms a pass of 256 receipts, most of it
holding the GIL) is then off the writer's loop as well as off its lock
(docs/decisions.md, "The Merkle log in a file of its own on SQLite").

``run_log_keeper`` is the process: the sequencer's loop, and the signing keys followed
like a gateway's (it signs checkpoints). ``LogKeeperProcess`` is the writer's handle: it
starts the process, restarts it if it dies, and stops it. Nothing is lost if it dies
mid-pass: the pass rolls back whole, the receipts stay queued, and the next process
places them; receipts placed but not yet cleared off the queue are passed over.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
from datetime import UTC, datetime
from types import FrameType

from execauth.config import Settings
from execauth.keyring import Keyring
from execauth.observability.logs import name_process, setup_logging
from execauth.observability.metrics import Metrics
from execauth.serving.runtime import freeze_startup_objects, open_stores
from execauth.serving.sequencer import Sequencer
from execauth.serving.supervised_process import SupervisedProcess
from execauth.store.ledger import LogStore
from execauth.store.signing_keys import SigningKeyStore

log = logging.getLogger("execauth.log_keeper")
STOP_TIMEOUT_SECONDS = 30.0  # a pass of 2,000 receipts takes about 30 ms


def run_log_keeper() -> None:
    """The log keeper process's main (a ``multiprocessing`` spawn target)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group; the writer stops us
    name_process("log keeper")
    settings = Settings()
    setup_logging(settings)
    secret, engine = open_stores(settings, migrate=False)
    keyring = Keyring(SigningKeyStore(engine), secret)
    keyring.refresh(datetime.now(UTC))
    sequencer = Sequencer(
        LogStore(engine),
        keyring,
        settings.issuer,
        interval_seconds=settings.sequencer_interval_seconds,
        metrics=Metrics(),
    )
    stopping = threading.Event()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    freeze_startup_objects()
    sequencer.start()
    parent = os.getppid()
    log.info("log keeper process %d placing receipts", os.getpid())
    try:
        while not stopping.wait(settings.refresh_interval_seconds):
            if os.getppid() != parent:
                log.warning("the writer process is gone; the log keeper stops")
                break
            try:
                # Checkpoints are signed here: follow rotation and revocation.
                keyring.refresh(datetime.now(UTC))
            except Exception:
                log.exception("refreshing signing keys failed")
    finally:
        sequencer.stop()  # the pass under way commits or rolls back whole
        engine.dispose()


class LogKeeperProcess(SupervisedProcess):
    """The writer process's handle on the log keeper process: restarted if it dies
    (receipts wait in the queue meanwhile)."""

    def __init__(self) -> None:
        super().__init__("log keeper", stop_seconds=STOP_TIMEOUT_SECONDS)
        self._context = multiprocessing.get_context("spawn")

    def _spawn(self) -> None:
        process = self._context.Process(target=run_log_keeper, name="execauth-log-keeper")
        process.start()
        self._process = process
