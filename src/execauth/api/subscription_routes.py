"""Decision-stream subscriptions, shared by the console and the operator surface.

An organization's ``admin`` key (or the platform admin) creates, pauses, resumes and
deletes them; ``auditor`` keys read them, lag and dead-letter state included. A
webhook's signing secret is answered once, at creation, and stored sealed.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

import anyio.to_thread
import msgspec
from starlette.requests import Request
from starlette.responses import Response
from ulid import ULID

from execauth.api.key_routes import Scope
from execauth.api.pagination import MAX_BIGINT, integer, text
from execauth.api.views import ts
from execauth.api.wire import decode_as, json_response, read_json_body
from execauth.config import Settings
from execauth.errors import InvalidRequest, NotFound
from execauth.server_secret import ServerSecret
from execauth.store.subscriptions import ACTIVE, PAUSED, Subscription, SubscriptionStore
from execauth.streaming.events import (
    new_webhook_secret,
    parse_event_types,
    seal_webhook_secret,
)
from execauth.tenancy.audit import AuditEvent
from execauth.usecases.execute import Clock

# A NATS subject of plain tokens: no wildcards (a publisher names one subject), no spaces.
SUBJECT = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")


class NewSubscription(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    sink: str  # webhook | nats
    url: str | None = None
    subject: str | None = None
    start: str | int = "now"  # "now", "beginning", or a log index
    events: list[str] | None = None  # event types delivered (docs/observability.md); None: all


class Resume(msgspec.Struct, forbid_unknown_fields=True):
    start: int | None = None  # a log index; absent: where it stopped


def subscription_view(subscription: Subscription, log_size: int) -> dict[str, Any]:
    return {
        "subscription_id": subscription.subscription_id,
        "org_id": subscription.org_id,
        "name": subscription.name,
        "sink": subscription.sink,
        "target": subscription.target,
        "state": subscription.state,
        "next_index": subscription.next_index,
        "delivered": subscription.delivered,
        # Entries of the org's log not yet acknowledged by the sink.
        "lag": max(0, log_size - subscription.next_index),
        "attempts": subscription.attempts,
        "last_error": subscription.last_error,
        "next_attempt_at": ts(subscription.next_attempt_at),
        "created_at": ts(subscription.created_at),
        "delivered_at": ts(subscription.delivered_at),
        "events": None if subscription.events is None else list(subscription.events),
    }


def event_filter(values: list[str] | None) -> str | None:
    """The stored form of a subscription's ``events`` (JSON list); ``None``: every event."""
    if values is None:
        return None
    try:
        return json.dumps(list(parse_event_types(values)))
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc


class SubscriptionHandlers:
    def __init__(
        self,
        store: SubscriptionStore,
        secret: ServerSecret,
        settings: Settings,
        scope: Scope,
        clock: Clock,
    ) -> None:
        self._store = store
        self._secret = secret
        self._settings = settings
        self._scope = scope
        self._clock = clock

    async def create(self, request: Request) -> Response:
        org_id, actor = await self._scope(request)
        spec = decode_as(
            await read_json_body(request, self._settings.max_body_bytes), NewSubscription
        )
        name = text(spec.name, "name", max_length=128)
        target, secret = self._target(spec)
        events = event_filter(spec.events)
        log_size = await anyio.to_thread.run_sync(self._store.log_size, org_id)
        start = self._start(spec.start, log_size)
        now = self._clock()
        subscription_id = "sub_" + str(ULID()).lower()
        sealed = seal_webhook_secret(self._secret, subscription_id, secret) if secret else None
        subscription = Subscription(
            subscription_id=subscription_id,
            org_id=org_id,
            name=name,
            sink=spec.sink,
            target=target,
            sealed_secret=sealed,
            state=ACTIVE,
            next_index=start,
            delivered=0,
            attempts=0,
            last_error=None,
            next_attempt_at=now,
            created_at=now,
            delivered_at=None,
            event_types=events,
        )
        audit = AuditEvent(
            org_id,
            now,
            actor,
            "subscription.created",
            subscription_id,
            {"sink": spec.sink, "target": target, "start": start, "events": subscription.events},
        )
        await anyio.to_thread.run_sync(self._store.create, subscription, audit)
        view = subscription_view(subscription, log_size)
        if secret:
            view["secret"] = secret  # shown once; verify deliveries with it
        return json_response(view, 201)

    async def list(self, request: Request) -> Response:
        org_id, _ = await self._scope(request)
        found = await anyio.to_thread.run_sync(self._store.list_for_org, org_id)
        log_size = await anyio.to_thread.run_sync(self._store.log_size, org_id)
        return json_response({"subscriptions": [subscription_view(s, log_size) for s in found]})

    async def show(self, request: Request) -> Response:
        org_id, _ = await self._scope(request)
        found = await self._existing(org_id, request.path_params["subscription_id"])
        log_size = await anyio.to_thread.run_sync(self._store.log_size, org_id)
        return json_response(subscription_view(found, log_size))

    async def delete(self, request: Request) -> Response:
        org_id, actor = await self._scope(request)
        subscription_id = request.path_params["subscription_id"]
        audit = AuditEvent(org_id, self._clock(), actor, "subscription.deleted", subscription_id)
        if not await anyio.to_thread.run_sync(self._store.delete, org_id, subscription_id, audit):
            raise NotFound("no such subscription in this organization")
        return Response(status_code=204)

    async def resume(self, request: Request) -> Response:
        has_body = request.headers.get("content-length", "0") != "0"
        body = await read_json_body(request, self._settings.max_body_bytes) if has_body else {}
        spec = decode_as(body, Resume)
        start = None
        if spec.start is not None:
            start = integer(spec.start, "start", minimum=0, maximum=MAX_BIGINT)
        return await self._set_state(request, ACTIVE, "subscription.resumed", start)

    async def pause(self, request: Request) -> Response:
        return await self._set_state(request, PAUSED, "subscription.paused", None)

    async def _set_state(
        self, request: Request, state: str, action: str, start: int | None
    ) -> Response:
        org_id, actor = await self._scope(request)
        subscription_id = request.path_params["subscription_id"]
        now = self._clock()
        details = {} if start is None else {"start": start}
        audit = AuditEvent(org_id, now, actor, action, subscription_id, details)
        changed = await anyio.to_thread.run_sync(
            lambda: self._store.set_state(
                org_id, subscription_id, state, now, audit, next_index=start
            )
        )
        if not changed:
            raise NotFound("no such subscription in this organization")
        found = await self._existing(org_id, subscription_id)
        log_size = await anyio.to_thread.run_sync(self._store.log_size, org_id)
        return json_response(subscription_view(found, log_size))

    async def _existing(self, org_id: str, subscription_id: str) -> Subscription:
        found = await anyio.to_thread.run_sync(self._store.get, org_id, subscription_id)
        if found is None:
            raise NotFound("no such subscription in this organization")
        return found

    def _target(self, spec: NewSubscription) -> tuple[str, str | None]:
        """The sink's target and, for a webhook, a new signing secret."""
        if spec.sink == "webhook":
            if spec.subject is not None or spec.url is None:
                raise InvalidRequest("a webhook subscription takes url (and no subject)")
            url = text(spec.url, "url", max_length=2048)
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise InvalidRequest("url must be an absolute http:// or https:// URL")
            return url, new_webhook_secret()
        if spec.sink == "nats":
            if spec.url is not None or spec.subject is None:
                raise InvalidRequest("a nats subscription takes subject (and no url)")
            if not self._settings.nats_url:
                raise InvalidRequest(
                    "this service has no NATS server configured (EXECAUTH_NATS_URL)"
                )
            subject = text(spec.subject, "subject", max_length=255)
            if not SUBJECT.match(subject):
                raise InvalidRequest(
                    "subject must be dot-separated tokens of letters, digits, '-' and '_'"
                )
            return subject, None
        raise InvalidRequest("sink must be 'webhook' or 'nats'")

    @staticmethod
    def _start(start: str | int, log_size: int) -> int:
        if start == "now":
            return log_size
        if start == "beginning":
            return 0
        if isinstance(start, str):
            raise InvalidRequest("start must be 'now', 'beginning' or a log index")
        return integer(start, "start", minimum=0, maximum=MAX_BIGINT)
