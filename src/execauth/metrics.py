"""Prometheus metrics of one service instance (served at ``GET /metrics``).

Each app gets its own registry (no globals), so tests and several apps in one
process never share counters. Under ``execauth serve --workers N`` each worker
process records into prometheus_client's multiprocess files
(``PROMETHEUS_MULTIPROC_DIR``, set by the parent before the workers start) and
``GET /metrics``, whichever worker answers it, reports the sum over all workers.
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

MULTIPROCESS_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"

_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


def _process_identifier() -> int:
    return _pid


if os.environ.get(MULTIPROCESS_DIR_VARIABLE):
    # prometheus-client asks for the pid on every observation (a system call) to notice
    # a fork; ours is kept current by a fork hook instead (its documented
    # ``process_identifier`` parameter). Workers are spawned, so it rarely changes.
    os.register_at_fork(after_in_child=_forked)
    values.ValueClass = values.MultiProcessValue(  # type: ignore[no-untyped-call]
        process_identifier=_process_identifier
    )


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # Collectors that read shared state (the database) at scrape time, not per process.
        self._shared: list[Collector] = []
        self.decisions = Counter(
            "execauth_decisions",
            "Signed and stored decisions, by decision",
            ["decision"],
            registry=self.registry,
        )
        self.execute_responses = Counter(
            "execauth_execute_responses",
            "Answers of POST /v1/execute, by HTTP status (499: the client left mid-body)",
            ["status"],
            registry=self.registry,
        )
        self.execute_seconds = Histogram(
            "execauth_execute_seconds",
            "Time to answer POST /v1/execute",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
            registry=self.registry,
        )
        self.writer_batch_size = Histogram(
            "execauth_writer_batch_size",
            "Receipts committed per transaction by the group-commit writer",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            registry=self.registry,
        )
        self.writer_commit_seconds = Histogram(
            "execauth_writer_commit_seconds",
            "Duration of one group-commit transaction, fsync included",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1),
            registry=self.registry,
        )

        self.sequenced = Counter(
            "execauth_sequenced_receipts",
            "Receipts appended to their organization's Merkle log",
            registry=self.registry,
        )
        self.sequencer_lag_seconds = Histogram(
            "execauth_sequencer_lag_seconds",
            "Age of the oldest receipt in each sequenced batch (decision to log entry)",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
            registry=self.registry,
        )

    def add_shared(self, collector: Collector) -> None:
        """Report ``collector``'s metrics too (read at scrape time, whichever worker answers)."""
        self._shared.append(collector)
        self.registry.register(collector)

    def exposition(self) -> bytes:
        """The text format of every metric: this process's, or all workers' together.

        It may read the database (``add_shared``): call it off the event loop.
        """
        directory = os.environ.get(MULTIPROCESS_DIR_VARIABLE)
        if not directory:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
        for collector in self._shared:
            registry.register(collector)
        return generate_latest(registry)

    def observe_sequenced(self, count: int, oldest_lag_seconds: float) -> None:
        self.sequenced.inc(count)
        self.sequencer_lag_seconds.observe(max(0.0, oldest_lag_seconds))

    def observe_commit(self, batch_size: int, seconds: float) -> None:
        self.writer_batch_size.observe(batch_size)
        self.writer_commit_seconds.observe(seconds)
