"""The writer process of ``execauth serve --workers N``: started, watched and stopped here.

``run_writer_process`` is the process itself: the group-commit ``ReceiptWriter``
and the log keeping over the database (as a single-process server runs them, but for
the sequencer on a SQLite file: the log keeper process it starts,
``serving/log_keeper.py``), served to the gateway workers by
``serving.remote_writer.WriterServer``.
``WriterProcess`` is the parent's handle: it starts the process before the
workers, restarts it if it dies while serving, and stops it after the workers.

Stopping: the writer outlives the gateways. Ctrl-C reaches the whole process
group, so the writer ignores SIGINT; on SIGTERM, or when its parent is gone, it
stops accepting connections, keeps serving the open ones until the gateways have
closed them (at most the gateways' own drain, ``EXECAUTH_SHUTDOWN_TIMEOUT_SECONDS``,
plus ``DRAIN_MARGIN_SECONDS``), then commits what is queued and exits: a gateway still
finishing an in-flight request always has its writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import time
from datetime import UTC, datetime

import uvloop

from execauth.config import Settings
from execauth.keyring import Keyring
from execauth.observability.logs import name_process, setup_logging
from execauth.observability.metrics import Metrics
from execauth.serving.log_keeper import LogKeeperProcess
from execauth.serving.receipt_writer import ReceiptWriter
from execauth.serving.remote_writer import WriterServer
from execauth.serving.runtime import freeze_startup_objects, open_stores
from execauth.serving.supervised_process import SupervisedProcess
from execauth.serving.write_path import build_write_path
from execauth.store.database import log_apart
from execauth.store.signing_keys import SigningKeyStore

log = logging.getLogger("execauth.writer")
DRAIN_MARGIN_SECONDS = 5.0
READY_TIMEOUT_SECONDS = 30.0


def run_writer_process(socket_path: str) -> None:
    """The writer process's main (a ``multiprocessing`` spawn target)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    name_process("writer")
    settings = Settings()  # EXECAUTH_LOG_LEVEL and the rest, from the parent's environment
    setup_logging(settings)
    secret, engine = open_stores(settings, migrate=False)
    keyring = Keyring(SigningKeyStore(engine), secret)
    keyring.refresh(datetime.now(UTC))
    # The same write path as a single-process server's: the group-commit writer, the
    # sequencer and the dispatcher, here for all the gateway workers.
    write_path = build_write_path(settings, engine, secret, keyring, Metrics())
    assert write_path.local is not None  # no writer socket: this process commits
    writer = write_path.local
    # On a SQLite file the log has a file of its own, and a process of its own places
    # receipts there (its CPU off this loop's GIL); on PostgreSQL, a thread of this one.
    keeper = LogKeeperProcess() if log_apart(engine) else None
    write_path.start_log_keeping(sequence=keeper is None)
    if keeper is not None:
        keeper.start()
    freeze_startup_objects()
    try:
        # uvloop, as the gateways use: the socket loop's I/O is most of its work.
        uvloop.run(
            _serve(
                writer,
                keyring,
                socket_path,
                settings.refresh_interval_seconds,
                drain_seconds=settings.shutdown_timeout_seconds + DRAIN_MARGIN_SECONDS,
            )
        )
    finally:
        if keeper is not None:
            keeper.stop()
        write_path.stop_log_keeping()
        write_path.stop()  # commits everything still queued
        engine.dispose()


async def _serve(
    writer: ReceiptWriter,
    keyring: Keyring,
    socket_path: str,
    refresh_seconds: float,
    *,
    drain_seconds: float,
) -> None:
    # Commits on this loop, which only carries frames (serving/receipt_writer.py).
    writer.start_on_loop(asyncio.get_running_loop())
    server = WriterServer(writer.submit)
    await server.start(socket_path)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    parent = os.getppid()
    log.info("receipt writer process %d serving on %s", os.getpid(), socket_path)
    while not stopping.is_set():
        if os.getppid() != parent:
            log.warning("the serving parent is gone; the writer stops")
            break
        try:
            # The sequencer signs checkpoints: follow rotation and revocation like a gateway.
            await asyncio.to_thread(keyring.refresh, datetime.now(UTC))
        except Exception:
            log.exception("refreshing signing keys failed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), refresh_seconds)
    await server.close()
    try:
        async with asyncio.timeout(drain_seconds):
            await server.wait_idle()
    except TimeoutError:
        log.warning("gateways still connected after %.0f s; the writer stops", drain_seconds)


class WriterProcess(SupervisedProcess):
    """The parent's handle on the writer process: restarted if it dies while serving
    (the gateways answer 503 meanwhile)."""

    def __init__(self, socket_path: str, *, drain_seconds: float = 30.0) -> None:
        # On SIGTERM it drains, commits and exits: its drain, then a margin to commit.
        super().__init__("receipt writer", stop_seconds=drain_seconds + DRAIN_MARGIN_SECONDS + 15)
        self.socket_path = socket_path
        self._context = multiprocessing.get_context("spawn")

    def stop(self) -> None:
        super().stop()
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

    def _spawn(self) -> None:
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        process = self._context.Process(
            target=run_writer_process,
            args=(self.socket_path,),
            name="execauth-writer",
        )
        process.start()
        self._process = process
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while not _accepts(self.socket_path):
            if not process.is_alive():
                raise RuntimeError(
                    f"the receipt writer process exited with code {process.exitcode}"
                )
            if time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("the receipt writer process did not start in time")
            time.sleep(0.05)


def _accepts(socket_path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(socket_path)
        except OSError:
            return False
    return True
