"""The console's Streams page: each decision-stream subscription, its lag and its state.

Admins may pause a subscription or resume it (after a pause or a dead letter) and choose
which event types it delivers (every event, decisions only, or approval steps only);
auditors see the same page read-only. Creating one stays with the API and the CLI, which can
show a webhook's secret once where it is about to be stored (docs/observability.md).
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from execauth.api.subscription_routes import event_filter, subscription_view
from execauth.errors import InvalidRequest, NotFound
from execauth.store.subscriptions import ACTIVE, PAUSED, SubscriptionStore
from execauth.streaming.events import APPROVAL_WILDCARD, EVENT_TYPE
from execauth.tenancy.audit import AuditEvent, key_actor
from execauth.usecases.execute import Clock
from execauth.web.auth import WRITERS, ConsoleAuth, Operator
from execauth.web.rendering import Renderer, page_route

# The form's choices; any other combination stays with the API and the CLI.
EVENT_CHOICES: dict[str, list[str] | None] = {
    "all": None,
    "decisions": [EVENT_TYPE],
    "approvals": [APPROVAL_WILDCARD],
}


def stream_pages(
    store: SubscriptionStore, clock: Clock, *, renderer: Renderer, auth: ConsoleAuth
) -> list[Route]:

    @auth.page()
    async def streams(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        org_id = operator.org.org_id
        found = await anyio.to_thread.run_sync(store.list_for_org, org_id)
        log_size = await anyio.to_thread.run_sync(store.log_size, org_id)
        context: dict[str, Any] = {
            "operator": operator,
            "path": request.url.path,
            "streams": [subscription_view(s, log_size) for s in found],
            "log_size": log_size,
        }
        return renderer.page("streams.html", context)

    def set_state(state: str, action: str) -> Any:
        @auth.page(WRITERS)
        async def change(request: Request, operator: Operator, form: dict[str, str]) -> Response:
            subscription_id = request.path_params["subscription_id"]
            now = clock()
            audit = AuditEvent(
                operator.org.org_id, now, key_actor(operator.key.key_id), action, subscription_id
            )
            changed = await anyio.to_thread.run_sync(
                lambda: store.set_state(operator.org.org_id, subscription_id, state, now, audit)
            )
            if not changed:
                raise NotFound("no such subscription in this organization")
            return RedirectResponse("/console/streams", 303)

        return change

    @auth.page(WRITERS)
    async def set_events(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        subscription_id = request.path_params["subscription_id"]
        choice = form.get("events", "")
        if choice not in EVENT_CHOICES:
            raise InvalidRequest("events must be one of: " + ", ".join(EVENT_CHOICES))
        events = event_filter(EVENT_CHOICES[choice])
        audit = AuditEvent(
            operator.org.org_id,
            clock(),
            key_actor(operator.key.key_id),
            "subscription.events_changed",
            subscription_id,
            {"events": EVENT_CHOICES[choice]},
        )
        changed = await anyio.to_thread.run_sync(
            lambda: store.set_event_types(operator.org.org_id, subscription_id, events, audit)
        )
        if not changed:
            raise NotFound("no such subscription in this organization")
        return RedirectResponse("/console/streams", 303)

    return [
        page_route("/console/streams", streams, "GET"),
        page_route("/console/streams/{subscription_id}/events", set_events, "POST"),
        page_route(
            "/console/streams/{subscription_id}/pause",
            set_state(PAUSED, "subscription.paused"),
            "POST",
        ),
        page_route(
            "/console/streams/{subscription_id}/resume",
            set_state(ACTIVE, "subscription.resumed"),
            "POST",
        ),
    ]
