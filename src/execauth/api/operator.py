"""The operator surface under ``/operator``: an organization's own admin and auditor keys.

Everything here is scoped to the caller's organization; another org's ids are
simply not found (404), never shown. ``admin`` keys may change keys and publish
policies; ``auditor`` keys may only read (a replay of one execution writes its lineage,
so it needs ``admin``); ``execute`` keys have no access (403), except to the log routes
(``api.ledger_routes``), which any key of the organization may read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from execauth.api.approval_routes import approval_routes
from execauth.api.history import audit_page, executions_page
from execauth.api.key_routes import KeyHandlers
from execauth.api.pagination import month_param
from execauth.api.policy_routes import PolicyHandlers
from execauth.api.replay_routes import ReplayHandlers
from execauth.api.subscription_routes import SubscriptionHandlers
from execauth.api.views import execution_detail
from execauth.api.wire import json_response
from execauth.errors import Forbidden, NotFound
from execauth.serving.runtime import Runtime
from execauth.store.subscriptions import SubscriptionStore
from execauth.tenancy.audit import key_actor
from execauth.usecases.approve import Approvals
from execauth.usecases.control_plane import ControlPlane
from execauth.usecases.execute import Clock, ExecutionService, Principal
from execauth.usecases.replay import ReplayService
from execauth.usecases.usage import UsageQueries

Handler = Callable[[Request], Awaitable[Response]]
READERS = ("admin", "auditor")
WRITERS = ("admin",)


def operator_routes(
    runtime: Runtime,
    service: ExecutionService,
    *,
    plane: ControlPlane,
    usage: UsageQueries,
    replays: ReplayService,
    approvals: Approvals,
    subscriptions: SubscriptionStore,
    clock: Clock,
) -> list[BaseRoute]:
    """``service`` authenticates the org's keys; ``runtime`` serves the read-only listings."""

    async def principal(request: Request, roles: tuple[str, ...]) -> Principal:
        caller = await service.authenticate(request.headers.get("authorization"))
        if caller.api_key.role not in roles:
            raise Forbidden(
                f"a key with role {caller.api_key.role!r} cannot use this operator endpoint "
                f"(needs {' or '.join(roles)})"
            )
        return caller

    def scope(roles: tuple[str, ...]) -> Callable[[Request], Awaitable[tuple[str, str]]]:
        async def org_and_actor(request: Request) -> tuple[str, str]:
            caller = await principal(request, roles)
            return caller.org.org_id, key_actor(caller.api_key.key_id)

        return org_and_actor

    readers, writers = scope(READERS), scope(WRITERS)
    max_body = runtime.settings.max_body_bytes
    replay_handlers = ReplayHandlers(replays, readers)
    # Replaying one execution appends to its lineage, a write: admin only (auditors read).
    lineage_replays = ReplayHandlers(replays, writers)
    read_keys = KeyHandlers(plane, readers, max_body)
    write_keys = KeyHandlers(plane, writers, max_body)
    read_policies = PolicyHandlers(plane, runtime.control, readers)
    write_policies = PolicyHandlers(plane, runtime.control, writers)
    read_streams = SubscriptionHandlers(
        subscriptions, runtime.secret, runtime.settings, readers, clock
    )
    write_streams = SubscriptionHandlers(
        subscriptions, runtime.secret, runtime.settings, writers, clock
    )

    async def list_executions(request: Request) -> Response:
        org_id, _ = await readers(request)
        return json_response(await executions_page(runtime, request, org_id))

    async def show_execution(request: Request) -> Response:
        org_id, _ = await readers(request)
        execution_id = request.path_params["execution_id"]
        record = await anyio.to_thread.run_sync(runtime.executions.get, org_id, execution_id)
        if record is None:
            raise NotFound("no such execution in this organization")
        lineage = await anyio.to_thread.run_sync(runtime.executions.lineage, org_id, execution_id)
        return json_response(execution_detail(record, lineage))

    async def audit(request: Request) -> Response:
        org_id, _ = await readers(request)
        return json_response(await audit_page(runtime, request, org_id))

    async def org_usage(request: Request) -> Response:
        caller = await principal(request, READERS)
        return json_response(await usage.org_usage(caller.org, month_param(request)))

    return [
        Route("/operator/keys", read_keys.list, methods=["GET"]),
        Route("/operator/keys", write_keys.issue, methods=["POST"]),
        Route("/operator/keys/{key_id}/rotate", write_keys.rotate, methods=["POST"]),
        Route("/operator/keys/{key_id}", write_keys.revoke, methods=["DELETE"]),
        Route("/operator/executions", list_executions, methods=["GET"]),
        Route("/operator/executions/{execution_id}", show_execution, methods=["GET"]),
        Route("/operator/executions/{execution_id}/replay", lineage_replays.one, methods=["POST"]),
        Route("/operator/replay", replay_handlers.range, methods=["POST"]),
        Route("/operator/policies", read_policies.list, methods=["GET"]),
        Route("/operator/policies/{policy_id}", read_policies.show, methods=["GET"]),
        Route("/operator/policies/{policy_id}", write_policies.publish, methods=["PUT"]),
        Route("/operator/audit", audit, methods=["GET"]),
        Route("/operator/usage", org_usage, methods=["GET"]),
        Route("/operator/subscriptions", read_streams.list, methods=["GET"]),
        Route("/operator/subscriptions", write_streams.create, methods=["POST"]),
        Route("/operator/subscriptions/{subscription_id}", read_streams.show, methods=["GET"]),
        Route(
            "/operator/subscriptions/{subscription_id}", write_streams.delete, methods=["DELETE"]
        ),
        Route(
            "/operator/subscriptions/{subscription_id}/resume",
            write_streams.resume,
            methods=["POST"],
        ),
        Route(
            "/operator/subscriptions/{subscription_id}/pause",
            write_streams.pause,
            methods=["POST"],
        ),
        *approval_routes(service, approvals, "operator", max_body),
    ]
