"""Where decision events go: a webhook (HTTP POST) or a NATS JetStream subject.

A sink delivers one batch, in order, and returns only once the other side has
acknowledged all of it (a 2xx answer; a JetStream ``PubAck`` per message); anything
else raises ``DeliveryFailed`` and the dispatcher retries the whole batch later.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime
from typing import Protocol

import httpx
import nats
from nats.aio.client import Client as NatsClient
from nats.errors import Error as NatsError
from nats.js.errors import Error as JetStreamError

from execauth.streaming.events import DecisionEvent, batch_body, batch_id, webhook_headers


class DeliveryFailed(Exception):
    """The sink did not acknowledge the batch; the message says why, for the console."""


class Sink(Protocol):
    async def deliver(self, events: list[DecisionEvent], now: datetime) -> None: ...

    async def close(self) -> None: ...


class WebhookSink:
    """POST the batch as one signed JSON body; any 2xx acknowledges every event in it."""

    def __init__(
        self, subscription_id: str, url: str, secret: str, *, timeout_seconds: float
    ) -> None:
        self._subscription_id = subscription_id
        self._url = url
        self._secret = secret
        # No redirects: a 3xx would send the signed body somewhere the org did not name.
        self._client = httpx.AsyncClient(timeout=timeout_seconds, follow_redirects=False)

    async def deliver(self, events: list[DecisionEvent], now: datetime) -> None:
        body = batch_body(self._subscription_id, events)
        headers = webhook_headers(self._secret, batch_id(self._subscription_id, events), now, body)
        try:
            response = await self._client.post(self._url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            raise DeliveryFailed(f"{type(exc).__name__}: {exc}") from exc
        if not response.is_success:
            raise DeliveryFailed(f"the webhook answered {response.status_code}")

    async def close(self) -> None:
        await self._client.aclose()


class JetStreamSink:
    """Publish each event to a JetStream subject, one after the other, each acknowledged.

    One at a time on purpose: pipelined publishes that fail part-way would be retried
    after later ones were stored, and the stream would hold them out of log order.
    ``Nats-Msg-Id`` is the event id, so JetStream drops the duplicates a retry sends
    within the stream's duplicate window.
    """

    def __init__(self, server_url: str, subject: str, *, timeout_seconds: float) -> None:
        self._server_url = server_url
        self._subject = subject
        self._timeout = timeout_seconds
        self._client: NatsClient | None = None

    async def _connection(self) -> NatsClient:
        if self._client is None or self._client.is_closed:
            # nats-py keeps trying an unreachable server inside connect() even with
            # reconnects off, so the attempt is bounded here; the dispatcher's backoff
            # is the retry policy. Its errors reach us as exceptions, not as log lines.
            async with asyncio.timeout(self._timeout):
                self._client = await nats.connect(
                    self._server_url,
                    connect_timeout=self._timeout,
                    allow_reconnect=False,
                    max_reconnect_attempts=0,
                    error_cb=_ignore,
                )
        return self._client

    async def deliver(self, events: list[DecisionEvent], now: datetime) -> None:
        try:
            client = await self._connection()
            stream = client.jetstream(timeout=self._timeout)
            for event in events:
                await stream.publish(
                    self._subject, event.encode(), headers={"Nats-Msg-Id": event.event_id}
                )
        except (NatsError, JetStreamError, OSError, TimeoutError) as exc:
            await self.close()
            raise DeliveryFailed(f"NATS: {type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and not client.is_closed:
            # Closing a broken connection: nothing is left to tell anyone.
            with contextlib.suppress(NatsError, OSError):
                await client.close()


async def _ignore(error: Exception) -> None:
    """nats-py's error callback: a failed delivery is reported by ``DeliveryFailed``."""
