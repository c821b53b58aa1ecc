"""The web console and the public ``/verify`` page, as routes for the app factory.

``/verify``, the public site (``/``, ``/trust``, ``/guides``) and the static assets
belong to the gateway surface (public); the
console belongs to the operator surface. Assets are served wherever a page is,
so a listener with only the operator surface still has its stylesheet.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from execauth.serving.runtime import Runtime
from execauth.usecases.wiring import UseCases
from execauth.web.approvals import approval_pages
from execauth.web.auth import ConsoleAuth
from execauth.web.console import console_pages
from execauth.web.manage import manage_pages
from execauth.web.public import site_pages
from execauth.web.rendering import STATIC_PREFIX, Renderer, page_route
from execauth.web.streams import stream_pages


def web_routes(runtime: Runtime, cases: UseCases, surfaces: Sequence[str]) -> list[BaseRoute]:
    """Each page module gets the use cases it calls; ``runtime`` for keys and settings."""
    renderer = Renderer()
    routes: list[BaseRoute] = []
    if "gateway" in surfaces or "operator" in surfaces:
        routes.append(page_route(STATIC_PREFIX + "{name}", renderer.asset, "GET"))
    if "gateway" in surfaces:

        async def verify_page(request: Request) -> Response:
            """Receipts are checked in the browser; this page never receives one."""
            return renderer.page(
                "verify.html",
                {
                    "path": "/verify",
                    "now": request.query_params.get("now", ""),
                    "public_nav": True,
                },
            )

        routes.append(page_route("/verify", renderer.html_endpoint(verify_page), "GET"))
        routes += site_pages(runtime, renderer)
    if "operator" in surfaces:
        auth = ConsoleAuth(runtime, cases.execute, renderer)
        routes += console_pages(
            runtime, cases.replay, cases.usage, cases.clock, renderer=renderer, auth=auth
        )
        routes += manage_pages(
            runtime.control, cases.control, cases.replay, renderer=renderer, auth=auth
        )
        routes += stream_pages(cases.subscriptions, cases.clock, renderer=renderer, auth=auth)
        routes += approval_pages(cases.approvals, renderer=renderer, auth=auth)
    return routes
