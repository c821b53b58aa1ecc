"""The console (control plane) API under ``/console/v1``, for the platform administrator.

Authenticated by the bootstrap admin token (docs/api.md, "Authentication"). Organizations'
own admin keys use the operator surface (``api.operator``) instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio.to_thread
import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from execauth.api.history import audit_page
from execauth.api.key_routes import KeyHandlers
from execauth.api.pagination import month_param, query_text, time_param
from execauth.api.policy_routes import PolicyHandlers
from execauth.api.replay_routes import ReplayHandlers
from execauth.api.subscription_routes import SubscriptionHandlers
from execauth.api.views import org_view
from execauth.api.wire import decode_as, json_response, read_json_body
from execauth.errors import Unauthorized
from execauth.serving.runtime import Runtime
from execauth.store.subscriptions import SubscriptionStore
from execauth.tenancy.audit import PLATFORM_ADMIN
from execauth.usecases.control_plane import ControlPlane
from execauth.usecases.execute import Clock
from execauth.usecases.export import BundleExport
from execauth.usecases.replay import ReplayService
from execauth.usecases.usage import UsageQueries

Handler = Callable[[Request], Awaitable[Response]]


class NewOrg(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    plan: str | None = None  # the service's default_plan
    wire_profile: str = "a"


class OrgChanges(msgspec.Struct, forbid_unknown_fields=True):
    name: str | None = None
    plan: str | None = None
    wire_profile: str | None = None
    disabled: bool | None = None


def console_routes(
    runtime: Runtime,
    *,
    plane: ControlPlane,
    usage: UsageQueries,
    replays: ReplayService,
    export: BundleExport,
    subscriptions: SubscriptionStore,
    clock: Clock,
) -> list[BaseRoute]:
    """``runtime`` for the admin token, the settings and the read-only listings."""
    control = runtime.control
    max_body = runtime.settings.max_body_bytes

    def admin_only(handler: Handler) -> Handler:
        async def guarded(request: Request) -> Response:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not token or not runtime.admin.check(token.strip()):
                raise Unauthorized("the console needs Authorization: Bearer <admin token>")
            return await handler(request)

        return guarded

    async def path_org(request: Request) -> tuple[str, str]:
        return (await plane.existing_org(request.path_params["org_id"])).org_id, PLATFORM_ADMIN

    keys = KeyHandlers(plane, path_org, max_body)
    replay_handlers = ReplayHandlers(replays, path_org)
    policies = PolicyHandlers(plane, control, path_org)
    streams = SubscriptionHandlers(subscriptions, runtime.secret, runtime.settings, path_org, clock)

    async def create_org(request: Request) -> Response:
        spec = decode_as(await read_json_body(request, max_body), NewOrg)
        # No default plan configured: "" is refused as an unknown plan, listing the known.
        plan = spec.plan or runtime.settings.default_plan or ""
        org = await plane.create_org(spec.name, plan, spec.wire_profile, actor=PLATFORM_ADMIN)
        return json_response(org_view(org), 201)

    async def list_orgs(request: Request) -> Response:
        orgs = await anyio.to_thread.run_sync(control.list_orgs)
        return json_response({"orgs": [org_view(o) for o in orgs]})

    async def show_org(request: Request) -> Response:
        return json_response(org_view(await plane.existing_org(request.path_params["org_id"])))

    async def update_org(request: Request) -> Response:
        spec = decode_as(await read_json_body(request, max_body), OrgChanges)
        org = await plane.update_org(
            request.path_params["org_id"],
            actor=PLATFORM_ADMIN,
            name=spec.name,
            plan=spec.plan,
            wire_profile=spec.wire_profile,
            disabled=spec.disabled,
        )
        return json_response(org_view(org))

    async def org_usage(request: Request) -> Response:
        org = await plane.existing_org(request.path_params["org_id"])
        return json_response(await usage.org_usage(org, month_param(request)))

    async def usage_export(request: Request) -> Response:
        return json_response(await usage.billing_export(month_param(request)))

    async def export_bundle(request: Request) -> Response:
        """The org's audit bundle for [since, until) (``execauth export``), streamed."""
        org_id, _ = await path_org(request)
        since, until = time_param(request, "since"), time_param(request, "until")
        scope = await anyio.to_thread.run_sync(export.scope, org_id, since, until)
        # A sync iterator: Starlette reads each chunk in a worker thread, off the event loop,
        # and no more of the bundle than one chunk is ever in memory.
        chunks = export.chunks(scope)
        return StreamingResponse(chunks, media_type="application/json", headers=scope.headers())

    async def platform_audit(request: Request) -> Response:
        return json_response(await audit_page(runtime, request, query_text(request, "org_id")))

    prefix = "/console/v1/orgs"
    org = prefix + "/{org_id}"
    return [
        Route(prefix, admin_only(create_org), methods=["POST"]),
        Route(prefix, admin_only(list_orgs), methods=["GET"]),
        Route(org, admin_only(show_org), methods=["GET"]),
        Route(org, admin_only(update_org), methods=["PATCH"]),
        Route(org + "/keys", admin_only(keys.issue), methods=["POST"]),
        Route(org + "/keys", admin_only(keys.list), methods=["GET"]),
        Route(org + "/keys/{key_id}/rotate", admin_only(keys.rotate), methods=["POST"]),
        Route(org + "/keys/{key_id}", admin_only(keys.revoke), methods=["DELETE"]),
        Route(org + "/policies", admin_only(policies.list), methods=["GET"]),
        Route(org + "/policies/{policy_id}", admin_only(policies.publish), methods=["PUT"]),
        Route(org + "/policies/{policy_id}", admin_only(policies.show), methods=["GET"]),
        Route(org + "/usage", admin_only(org_usage), methods=["GET"]),
        Route(org + "/replay", admin_only(replay_handlers.range), methods=["POST"]),
        Route(org + "/export", admin_only(export_bundle), methods=["GET"]),
        Route(
            org + "/executions/{execution_id}/replay",
            admin_only(replay_handlers.one),
            methods=["POST"],
        ),
        Route(org + "/subscriptions", admin_only(streams.list), methods=["GET"]),
        Route(org + "/subscriptions", admin_only(streams.create), methods=["POST"]),
        Route(org + "/subscriptions/{subscription_id}", admin_only(streams.show), methods=["GET"]),
        Route(
            org + "/subscriptions/{subscription_id}",
            admin_only(streams.delete),
            methods=["DELETE"],
        ),
        Route(
            org + "/subscriptions/{subscription_id}/resume",
            admin_only(streams.resume),
            methods=["POST"],
        ),
        Route(
            org + "/subscriptions/{subscription_id}/pause",
            admin_only(streams.pause),
            methods=["POST"],
        ),
        Route("/console/v1/usage", admin_only(usage_export), methods=["GET"]),
        Route("/console/v1/audit", admin_only(platform_audit), methods=["GET"]),
    ]
