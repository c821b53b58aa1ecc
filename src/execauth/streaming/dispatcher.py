"""The dispatcher: delivers each subscription's events from the durable log, at least once.

It runs on a thread of its own with its own event loop, never on a gateway's loop
and never on the writer's thread, so a slow or dead sink delays nothing but its own
subscription. Each step it takes the lease of the subscriptions that are due, reads
the next events of each from the org's log (``log_leaves`` joined to the stored
receipts), hands them to the sink, and moves the cursor only after the sink
acknowledged them. A crash between the acknowledgement and the cursor's update sends
those events again: receivers de-duplicate by event id (JetStream does it itself).

A subscription may filter event types (``execauth.approval.*`` only, say): the entries it
does not want are passed over, the cursor still moving through every one of them.

A failing sink is retried with exponential backoff; after ``max_attempts`` failures in
a row the subscription waits in ``dead_letter`` until someone resumes it. It never
skips ahead: per organization, order is the log's order (docs/observability.md).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine
from ulid import ULID

from execauth.config import Settings
from execauth.server_secret import ServerSecret
from execauth.store.subscriptions import Subscription, SubscriptionStore
from execauth.streaming.events import backoff_seconds, unseal_webhook_secret, wanted
from execauth.streaming.sinks import DeliveryFailed, JetStreamSink, Sink, WebhookSink

log = logging.getLogger("execauth.streaming")


@dataclass(frozen=True, slots=True)
class DispatchSettings:
    batch_size: int = 256
    batches_per_turn: int = 8  # then the lease is renewed and other subscriptions go
    poll_interval_seconds: float = 0.2
    lease_seconds: float = 30.0
    sink_timeout_seconds: float = 10.0
    max_attempts: int = 12  # 1 + 2 + … + 300 s: about 25 minutes of retries
    max_backoff_seconds: float = 300.0
    nats_url: str | None = None


class Dispatcher:
    def __init__(
        self,
        store: SubscriptionStore,
        secret: ServerSecret,
        settings: DispatchSettings,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._store = store
        self._secret = secret
        self._settings = settings
        self._clock = clock
        self.owner = "dispatcher_" + str(ULID()).lower()
        self._sinks: dict[str, Sink] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="execauth-stream", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        asyncio.run(self._loop())

    async def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    await self.run_once()
                except Exception:  # the store unreachable, say: log and try again next turn
                    log.exception("a decision-stream turn failed; retrying")
                await asyncio.sleep(self._settings.poll_interval_seconds)
        finally:
            await self.close_sinks()
            try:
                await asyncio.to_thread(self._store.release, self.owner)
            except Exception:  # the leases then simply expire
                log.exception("releasing decision-stream leases failed")

    # one turn -----------------------------------------------------------------------
    async def run_once(self) -> int:
        """Deliver what is due now; the number of events acknowledged in this turn."""
        now = self._clock()
        lease = timedelta(seconds=self._settings.lease_seconds)
        claimed = await asyncio.to_thread(self._store.claim_due, self.owner, now, lease)
        counts = await asyncio.gather(*(self._drain(s) for s in claimed))
        return sum(counts)

    async def _drain(self, subscription: Subscription) -> int:
        delivered = 0
        position = subscription.next_index
        for _ in range(self._settings.batches_per_turn):
            events = await asyncio.to_thread(
                self._store.read_events,
                subscription.org_id,
                position,
                self._settings.batch_size,
            )
            if not events:
                break
            if events[0].log_index != position:  # logs are gap-free: this cannot happen
                await self._failed(subscription, f"log entry {position} is missing")
                break
            # A filtered-out entry is passed over like an acknowledged one: the cursor still
            # walks the whole log, so order and "nothing missed" hold for what is wanted.
            chosen = [e for e in events if wanted(subscription.events, e.kind)]
            try:
                if chosen:
                    sink = self._sink_for(subscription)
                    await sink.deliver(chosen, self._clock())
            except (DeliveryFailed, ValueError) as exc:
                await self._failed(subscription, str(exc))
                break
            after = events[-1].log_index + 1
            moved = await asyncio.to_thread(
                functools.partial(
                    self._store.advance,
                    subscription.subscription_id,
                    self.owner,
                    position,
                    after,
                    self._clock(),
                    delivered=len(chosen),
                )
            )
            if not moved:  # our lease went to another instance meanwhile: let it go on
                break
            delivered += len(chosen)
            position = after
            if len(events) < self._settings.batch_size:
                break
        return delivered

    async def _failed(self, subscription: Subscription, error: str) -> None:
        current = await asyncio.to_thread(
            self._store.get, subscription.org_id, subscription.subscription_id
        )
        attempts = (current.attempts if current else subscription.attempts) + 1
        dead = attempts >= self._settings.max_attempts
        delay = backoff_seconds(attempts, cap=self._settings.max_backoff_seconds)
        log.warning(
            "decision stream %s: delivery failed (attempt %d%s): %s",
            subscription.subscription_id,
            attempts,
            ", now in dead letter" if dead else f", retry in {delay:.0f} s",
            error,
        )
        await asyncio.to_thread(
            self._store.record_failure,
            subscription.subscription_id,
            self.owner,
            attempts=attempts,
            error=error,
            retry_at=self._clock() + timedelta(seconds=delay),
            dead=dead,
        )
        sink = self._sinks.pop(subscription.subscription_id, None)
        if sink is not None:
            await sink.close()

    def _sink_for(self, subscription: Subscription) -> Sink:
        sink = self._sinks.get(subscription.subscription_id)
        if sink is not None:
            return sink
        timeout = self._settings.sink_timeout_seconds
        if subscription.sink == "webhook":
            if subscription.sealed_secret is None:
                raise DeliveryFailed("the webhook has no signing secret")
            secret = unseal_webhook_secret(
                self._secret, subscription.subscription_id, subscription.sealed_secret
            )
            sink = WebhookSink(
                subscription.subscription_id, subscription.target, secret, timeout_seconds=timeout
            )
        elif subscription.sink == "nats":
            if not self._settings.nats_url:
                raise DeliveryFailed("no NATS server is configured (EXECAUTH_NATS_URL)")
            sink = JetStreamSink(
                self._settings.nats_url, subscription.target, timeout_seconds=timeout
            )
        else:
            raise DeliveryFailed(f"unknown sink {subscription.sink!r}")
        self._sinks[subscription.subscription_id] = sink
        return sink

    async def close_sinks(self) -> None:
        """Close every sink's connection (the thread does it when it stops)."""
        sinks, self._sinks = self._sinks, {}
        for sink in sinks.values():
            await sink.close()


def dispatcher_for(settings: Settings, engine: Engine, secret: ServerSecret) -> Dispatcher | None:
    """The dispatcher a serving process runs, or ``None`` where streaming is turned off."""
    if not settings.streaming_enabled:
        return None
    return Dispatcher(
        SubscriptionStore(engine),
        secret,
        DispatchSettings(
            poll_interval_seconds=settings.stream_poll_interval_seconds,
            max_attempts=settings.stream_max_attempts,
            nats_url=settings.nats_url,
        ),
    )
