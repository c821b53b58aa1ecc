"""Decision-stream metrics, read from the subscriptions table when ``/metrics`` is scraped.

The cursor and the counters already live in the database (every instance moves them),
so the gauges are read there rather than kept per process: any instance answers with
the same, current figures. Labels are bounded by the number of subscriptions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import SQLAlchemyError

from execauth.store.tables import log_leaves, subscriptions

log = logging.getLogger("execauth.streaming")
LABELS = ["org_id", "subscription_id", "sink", "state"]


class StreamCollector(Collector):
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily(
            "execauth_stream_lag_entries",
            "Entries of the organization's log the subscription's sink has not acknowledged",
            labels=LABELS,
        )
        delivered = CounterMetricFamily(
            "execauth_stream_delivered",
            "Events the subscription's sink acknowledged",
            labels=LABELS,
        )
        failing = GaugeMetricFamily(
            "execauth_stream_failed_attempts",
            "Failed deliveries in a row (0 once one succeeds; dead letter after the maximum)",
            labels=LABELS,
        )
        log_size = (
            select(func.coalesce(func.max(log_leaves.c.log_index) + 1, 0))
            .where(log_leaves.c.org_id == subscriptions.c.org_id)
            .scalar_subquery()
        )
        query = select(
            subscriptions.c.org_id,
            subscriptions.c.subscription_id,
            subscriptions.c.sink,
            subscriptions.c.state,
            subscriptions.c.next_index,
            subscriptions.c.delivered,
            subscriptions.c.attempts,
            log_size,
        )
        try:
            with self._engine.connect() as conn:
                rows = conn.execute(query).all()
        except SQLAlchemyError:
            # A scrape must not fail because the database blinked: no stream figures this
            # time, and the log says why (the readiness probe reports the database).
            log.warning("reading decision-stream metrics failed", exc_info=True)
            return
        for org_id, subscription_id, sink, state, next_index, count, attempts, size in rows:
            labels = [org_id, subscription_id, sink, state]
            lag.add_metric(labels, max(0, int(size) - int(next_index)))
            delivered.add_metric(labels, int(count))
            failing.add_metric(labels, int(attempts))
        yield lag
        yield delivered
        yield failing
