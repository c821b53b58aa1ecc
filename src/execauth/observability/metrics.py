"""Prometheus metrics of one service instance (served at ``GET /metrics``).

Each app gets its own registry (no globals), so tests and several apps in one
process never share counters. Under ``execauth serve --workers N`` each worker
process records into prometheus_client's multiprocess files
(``PROMETHEUS_MULTIPROC_DIR``, set by the parent before the workers start) and
``GET /metrics``, whichever worker answers it, reports the sum over all workers
(gauges: the mode each declares, e.g. the most recent commit of any process).

Labels that come from tenants (organization, surface) are bounded per process by
``LabelBudget``: a tenant minting surfaces must not create a time series each
(docs/observability.md, "Metrics"). Figures that live in the database (quota use,
pending approvals, the sequencer's backlog, decision streams) are read at scrape
time by collectors (``StoreCollector``), so every worker and instance answers alike.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import Engine, Select, exists, func, or_, select
from sqlalchemy.exc import SQLAlchemyError

from execauth.policy.document import MAX_TTL_SECONDS
from execauth.store.tables import (
    approvals,
    executions,
    log_leaves,
    log_pending,
    orgs,
    usage_counters,
)
from execauth.tenancy.orgs import Plan
from execauth.tenancy.quota import month_period
from execauth.wire_time import epoch_millis

MULTIPROCESS_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
# The label value of everything past a budget. Never a real value: organization ids
# start with "org_" and surfaces have at least two dotted segments.
OTHER = "other"
DEFAULT_MAX_ORGS = 100
DEFAULT_MAX_SURFACES = 200

log = logging.getLogger("execauth.metrics")
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


class LabelBudget:
    """At most ``limit`` distinct label values; the ones seen after that read ``other``.

    First come, first kept: a value keeps its own series for the life of the process
    (a series that changed label mid-way would break every ``rate()`` over it).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._kept: set[str] = set()

    def label(self, value: str) -> str:
        if value in self._kept:
            return value
        if len(self._kept) < self.limit:
            self._kept.add(value)
            return value
        return OTHER


_Child = Counter  # a labelled child of a Counter is a Counter


class Metrics:
    def __init__(
        self,
        *,
        max_orgs: int = DEFAULT_MAX_ORGS,
        max_surfaces: int = DEFAULT_MAX_SURFACES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.orgs = LabelBudget(max_orgs)
        self.surfaces = LabelBudget(max_surfaces)
        self._clock = clock
        # Collectors that read shared state (the database) at scrape time, not per process.
        self._shared: list[Collector] = []
        # (org, surface, decision) → its child: the hot path does one dict lookup, not
        # prometheus-client's label validation and locking. Only unfolded labels are
        # kept, so the cache is bounded by the budgets like the series are.
        self._decision_children: dict[tuple[str, str, str], _Child] = {}
        # status → its child, likewise (statuses are a handful of integers).
        self._response_children: dict[int, _Child] = {}
        self._writer_queue: Callable[[], int] | None = None
        self.decisions = Counter(
            "execauth_decisions",
            "Signed and stored decisions, by organization, surface and decision",
            ["org_id", "surface", "decision"],
            registry=self.registry,
        )
        self.rate_limited = Counter(
            "execauth_rate_limited",
            "Executes refused with 429 because the organization was over its per-minute limit",
            ["org_id"],
            registry=self.registry,
        )
        self.quota_exceeded = Counter(
            "execauth_quota_exceeded",
            "Executes refused with 429 because the organization's monthly quota was used up",
            ["org_id"],
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
        # Across processes the latest commit of any writer ("max"); a gateway worker that
        # never commits reports 0 and never wins.
        self.writer_last_commit = Gauge(
            "execauth_writer_last_commit_timestamp_seconds",
            "Unix time of the writer's last successful commit",
            registry=self.registry,
            multiprocess_mode="max",
        )
        # Receipts waiting behind the batch just committed. One writer per instance: the
        # value last set wins, also over the files of a writer process that was restarted.
        self.writer_queue_depth = Gauge(
            "execauth_writer_queue_depth",
            "Receipts queued for the writer when its last commit finished",
            registry=self.registry,
            multiprocess_mode="mostrecent",
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
        # On SQLite a sequencing transaction holds the one write lock: receipt commits
        # wait behind it, so its length is a stall of the write path.
        self.sequencer_transaction_seconds = Histogram(
            "execauth_sequencer_transaction_seconds",
            "Duration of one sequencing transaction, commit included",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 5),
            registry=self.registry,
        )

    def add_shared(self, collector: Collector) -> None:
        """Report ``collector``'s metrics too (read at scrape time, whichever worker answers)."""
        self._shared.append(collector)
        self.registry.register(collector)

    def watch_writer(self, queued: Callable[[], int]) -> None:
        """Read the writer's queue depth (``queued()``) after each of its commits."""
        self._writer_queue = queued

    def exposition(self, *, writer_up: bool | None = None) -> bytes:
        """The text format of every metric: this process's, or all workers' together.

        ``writer_up`` is what the answering process just found (``/readyz``'s check); it
        is reported as ``execauth_writer_up``. It may read the database
        (``add_shared``): call it off the event loop.
        """
        directory = os.environ.get(MULTIPROCESS_DIR_VARIABLE)
        if not directory:
            text = generate_latest(self.registry)
        else:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
            for collector in self._shared:
                registry.register(collector)
            text = generate_latest(registry)
        if writer_up is None:
            return text
        up = GaugeMetricFamily(
            "execauth_writer_up",
            "1 when the receipt writer accepts writes (thread or writer process), else 0",
            value=1 if writer_up else 0,
        )
        return text + generate_latest(_Families([up]))

    # the hot path -------------------------------------------------------------
    def count_decision(self, org_id: str, surface: str, decision: str) -> None:
        child = self._decision_children.get((org_id, surface, decision))
        if child is None:
            child = self._decision_child(org_id, surface, decision)
        child.inc()

    def count_execute_response(self, status: int) -> None:
        child = self._response_children.get(status)
        if child is None:
            child = self._response_children[status] = self.execute_responses.labels(str(status))
        child.inc()

    def _decision_child(self, org_id: str, surface: str, decision: str) -> _Child:
        org, surf = self.orgs.label(org_id), self.surfaces.label(surface)
        child = self.decisions.labels(org, surf, decision)
        if org == org_id and surf == surface:
            self._decision_children[(org_id, surface, decision)] = child
        return child

    def count_rate_limited(self, org_id: str) -> None:
        self.rate_limited.labels(self.orgs.label(org_id)).inc()

    def count_quota_exceeded(self, org_id: str) -> None:
        self.quota_exceeded.labels(self.orgs.label(org_id)).inc()

    # the writer and the sequencer ----------------------------------------------
    def observe_sequenced(self, count: int, oldest_lag_seconds: float) -> None:
        self.sequenced.inc(count)
        self.sequencer_lag_seconds.observe(max(0.0, oldest_lag_seconds))

    def observe_sequencer_transaction(self, seconds: float) -> None:
        self.sequencer_transaction_seconds.observe(seconds)

    def observe_commit(self, batch_size: int, seconds: float) -> None:
        self.writer_batch_size.observe(batch_size)
        self.writer_commit_seconds.observe(seconds)
        self.writer_last_commit.set(self._clock())
        if self._writer_queue is not None:
            self.writer_queue_depth.set(self._writer_queue())


class _Families(Collector):
    """Already built metric families, as a registry's only collector."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


class StoreCollector(Collector):
    """Quota use, pending approvals and the sequencer's backlog, read when scraped.

    Per organization, at most ``max_orgs`` label values: the organizations closest to
    their quota, and those with the most approvals pending (the rest summed as
    ``other``). Every instance reads the same rows: aggregate with ``max``, not ``sum``.
    """

    def __init__(
        self,
        engine: Engine,
        plans: dict[str, Plan],
        *,
        max_orgs: int = DEFAULT_MAX_ORGS,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._engine = engine
        self._plans = plans
        self._max_orgs = max_orgs
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        try:
            with self._engine.connect() as conn:
                backlog = conn.execute(
                    select(func.count(), func.min(log_pending.c.decided_at_ms)).where(
                        # On SQLite with the log apart, placed receipts stay queued a
                        # moment (store/ledger.py, dequeue_placed): not a backlog.
                        ~exists().where(log_leaves.c.execution_id == log_pending.c.execution_id)
                    )
                ).one()
                usage = conn.execute(
                    select(usage_counters.c.org_id, orgs.c.plan, usage_counters.c.executes)
                    .join(orgs, orgs.c.org_id == usage_counters.c.org_id)
                    .where(usage_counters.c.period == month_period(now))
                    .where(orgs.c.disabled_at.is_(None))
                ).all()
                pending = conn.execute(_pending_approvals(now)).all()
        except SQLAlchemyError:
            # A scrape must not fail because the database blinked: no store figures this
            # time, and the log says why (the readiness probe reports the database).
            log.warning("reading store metrics failed", exc_info=True)
            return
        yield from self._backlog(now, backlog[0], backlog[1])
        yield from self._quota([(str(o), str(p), int(n)) for o, p, n in usage])
        yield from self._approvals(now, [(str(o), int(n), int(at)) for o, n, at in pending])

    def _backlog(self, now: datetime, count: int, oldest_ms: int | None) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "execauth_sequencer_pending_receipts",
            "Stored receipts not yet appended to their organization's Merkle log",
            value=int(count),
        )
        age = 0.0 if oldest_ms is None else max(0.0, now.timestamp() - int(oldest_ms) / 1000)
        yield GaugeMetricFamily(
            "execauth_sequencer_oldest_pending_seconds",
            "Age of the oldest receipt not yet in the Merkle log (0 when none waits)",
            value=age,
        )

    def _quota(self, rows: list[tuple[str, str, int]]) -> Iterator[Metric]:
        used = GaugeMetricFamily(
            "execauth_quota_used_executes",
            "Executes counted against the organization's quota this calendar month (UTC)",
            labels=["org_id"],
        )
        limit = GaugeMetricFamily(
            "execauth_quota_limit_executes",
            "The organization's monthly execute quota (absent: its plan is unmetered)",
            labels=["org_id"],
        )

        def closeness(row: tuple[str, str, int]) -> tuple[float, int]:
            plan = self._plans.get(row[1])
            cap = plan.executes_per_month if plan is not None else None
            return (row[2] / cap if cap else 0.0, row[2])

        # The organizations nearest their quota are the ones an alert is about.
        for org_id, plan_name, executes in sorted(rows, key=closeness, reverse=True)[
            : self._max_orgs
        ]:
            used.add_metric([org_id], int(executes))
            plan = self._plans.get(plan_name)
            if plan is not None and plan.executes_per_month is not None:
                limit.add_metric([org_id], plan.executes_per_month)
        yield used
        yield limit

    def _approvals(self, now: datetime, rows: list[tuple[str, int, int]]) -> Iterator[Metric]:
        count = GaugeMetricFamily(
            "execauth_approvals_pending",
            "Escalated requests waiting for a person's approval",
            labels=["org_id"],
        )
        oldest = GaugeMetricFamily(
            "execauth_approvals_oldest_pending_seconds",
            "Age of the organization's oldest approval still pending",
            labels=["org_id"],
        )
        ranked = sorted(rows, key=lambda row: row[1], reverse=True)
        rest_count, rest_age = 0, 0.0
        for index, (org_id, waiting, oldest_ms) in enumerate(ranked):
            age = max(0.0, now.timestamp() - oldest_ms / 1000)
            if index < self._max_orgs:
                count.add_metric([org_id], int(waiting))
                oldest.add_metric([org_id], age)
            else:
                rest_count += int(waiting)
                rest_age = max(rest_age, age)
        if len(ranked) > self._max_orgs:
            count.add_metric([OTHER], rest_count)
            oldest.add_metric([OTHER], rest_age)
        yield count
        yield oldest


def _pending_approvals(now: datetime) -> Select[Any]:
    """Per organization: escalations still waiting for people, and the oldest's decision time.

    An approval row is written only once someone votes or looks, so an escalation with
    no row, or a ``pending`` one, is waiting. Only escalations younger than the longest
    approval lifetime a policy may set can still be waiting: the window bounds the scan
    (the escalations index, by decision time) however long the service has run.
    """
    window_start_ms = epoch_millis(now - timedelta(seconds=MAX_TTL_SECONDS))
    return (
        select(executions.c.org_id, func.count(), func.min(executions.c.decided_at_ms))
        .select_from(
            executions.outerjoin(approvals, approvals.c.execution_id == executions.c.execution_id)
        )
        .where(executions.c.decision == "ESCALATE")
        .where(executions.c.decided_at_ms >= window_start_ms)
        .where(or_(approvals.c.state.is_(None), approvals.c.state == "pending"))
        .group_by(executions.c.org_id)
    )
