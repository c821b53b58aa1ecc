"""The write path of a serving process: where its receipts become durable, and who logs them.

``ReceiptSink`` is the one interface the rest of the service sees: "commit this record
and answer once it is durable". Two implementations sit behind it:

- ``ReceiptWriter`` (``serving/receipt_writer.py``): the group-commit thread of this process, for
  ``execauth serve --workers 1`` and for the writer process itself.
- ``RemoteReceiptWriter`` (``serving/remote_writer.py``): a frame to the writer process,
  for each gateway worker of ``execauth serve --workers N``.

Where the records are committed, the log is kept too: the sequencer appends them to the
organizations' Merkle logs and the dispatcher streams them to subscriptions (the
writer process of ``--workers N`` on a SQLite file hands the sequencer to a log keeper
process of its own: ``serving/log_keeper.py``). A ``WritePath`` holds the sink and that
log keeping together, and ``build_write_path`` is the one place that wires them for
every topology (docs/architecture.md, "The serving shell").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import Engine

from execauth.config import Settings
from execauth.keyring import Keyring
from execauth.observability.metrics import Metrics
from execauth.server_secret import ServerSecret
from execauth.serving.receipt_writer import ReceiptWriter
from execauth.serving.remote_writer import RemoteReceiptWriter
from execauth.serving.sequencer import Sequencer
from execauth.store.database import log_apart, make_engine
from execauth.store.executions import ExecutionRecord, PriorExecution, Repeat
from execauth.store.ledger import LogStore
from execauth.streaming.dispatcher import Dispatcher, dispatcher_for
from execauth.tenancy.quota import QuotaCheck


class ReceiptSink(Protocol):
    """Commit a record durably; answer only once it is (docs/architecture.md).

    ``write`` returns ``None`` for a new record, the prior execution when the
    idempotency key was taken, and raises ``QuotaExceeded`` (nothing stored),
    ``ReceiptIdTaken`` (nothing stored: another receipt has its id) or
    ``ServiceUnavailable`` (not confirmed in time, or not stored): never an answer for a
    record that is not durable.
    """

    def start(self) -> None: ...

    def stop(self) -> None: ...

    async def ready(self) -> bool: ...

    async def write(
        self, record: ExecutionRecord, quota: QuotaCheck | None = None
    ) -> PriorExecution | None: ...

    async def count_repeat(self, repeat: Repeat) -> None:
        """Count, durably, a repeat answered without ``write`` (``ServiceUnavailable`` if not)."""
        ...


@dataclass
class WritePath:
    """A process's receipt sink, and the log keeping that runs where records are committed.

    ``local`` is the group-commit writer when this process commits (then it also runs
    the sequencer and the dispatcher); ``None`` in a gateway worker, whose writer process
    does both. The sequencer object exists either way: tests drive its ``run_once``
    directly.
    """

    sink: ReceiptSink
    local: ReceiptWriter | None
    sequencer: Sequencer
    dispatcher: Dispatcher | None
    writer_engine: Engine | None = None  # the local writer's own engine, if it has one

    @property
    def keeps_log(self) -> bool:
        return self.local is not None

    def start(self) -> None:
        """Accept writes (idempotent for the in-process writer's callers)."""
        self.sink.start()

    def start_log_keeping(self, *, sequence: bool = True) -> None:
        """Sequence and stream here, if records are committed here (``sequence=False``:
        stream only; the writer process's log keeper process sequences)."""
        if self.local is None:
            return
        if sequence:
            self.sequencer.start()
        if self.dispatcher is not None:
            self.dispatcher.start()

    def stop_log_keeping(self) -> None:
        if self.local is not None and self.dispatcher is not None:
            self.dispatcher.stop()
        self.sequencer.stop()

    def stop(self) -> None:
        """Commit what is queued, then stop accepting writes."""
        self.sink.stop()
        if self.writer_engine is not None:
            self.writer_engine.dispose()


def build_write_path(
    settings: Settings,
    engine: Engine,
    secret: ServerSecret,
    keyring: Keyring,
    metrics: Metrics,
    *,
    writer_socket: str | None = None,
) -> WritePath:
    """The write path of a serving process: local (one process, or the writer process),
    or remote over ``writer_socket`` (a gateway worker of ``serve --workers N``)."""
    sequencer = Sequencer(
        LogStore(engine),
        keyring,
        settings.issuer,
        interval_seconds=settings.sequencer_interval_seconds,
        metrics=metrics,
    )
    if writer_socket is not None:
        remote = RemoteReceiptWriter(writer_socket, timeout_seconds=settings.write_timeout_seconds)
        return WritePath(remote, None, sequencer, None)
    # With the log apart, the writer has an engine of its own, without the log's file
    # attached: its BEGIN IMMEDIATE would otherwise take the log's write lock too, and
    # wait for the sequencer's passes (store/database.py, make_engine).
    writer_engine = None
    if log_apart(engine):
        writer_engine = make_engine(settings.database_url, with_log=False)
    local = ReceiptWriter(
        writer_engine or engine,
        max_batch=settings.writer_max_batch,
        timeout_seconds=settings.write_timeout_seconds,
        on_commit=metrics.observe_commit,
    )
    metrics.watch_writer(local.queued)
    return WritePath(
        local, local, sequencer, dispatcher_for(settings, engine, secret), writer_engine
    )


def remote_write_path(write_path: WritePath, socket_path: str, *, timeout: float) -> WritePath:
    """``write_path`` as a gateway worker sees it: the same sequencer object (never
    started here), the records sent to the writer process at ``socket_path``."""
    return WritePath(
        RemoteReceiptWriter(socket_path, timeout_seconds=timeout), None, write_path.sequencer, None
    )
