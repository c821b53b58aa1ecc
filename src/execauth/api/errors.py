"""The one place where errors become wire responses (docs/api.md, "Errors").

Profile A: ``{"error": code, "message": text, "request_id": id}``.
Profile B: ``{"error": {"code", "message", "request_id"}}``.
"""

from __future__ import annotations

import logging

from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match

from execauth.api.wire import json_response, profile_headers, request_id, wire_profile
from execauth.errors import (
    ExecauthError,
    InternalError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    ServiceUnavailable,
)
from execauth.store.database import is_unavailable, refuses_nul

log = logging.getLogger("execauth.api")


def render_error(request: Request, error: ExecauthError) -> Response:
    rid = request_id(request)
    fields: dict[str, object] = {"code": error.code, "message": error.message, "request_id": rid}
    if error.details is not None:
        fields["details"] = error.details
    if wire_profile(request) == "b":
        body: dict[str, object] = {"error": fields}
    else:
        body = {"error": fields.pop("code"), **fields}
    # Once a request was counted against its org's rate limit, every answer says so.
    counted = getattr(request.state, "rate_limit_headers", {})
    headers = {**profile_headers(request), **counted, **error.headers, "X-Request-Id": rid}
    if error.status == 401:
        headers.setdefault("WWW-Authenticate", _bearer_challenge(request))
    return json_response(body, error.status, headers)


def _bearer_challenge(request: Request) -> str:
    """RFC 6750 §3: a 401 names the scheme; ``invalid_token`` once a credential was sent."""
    if request.headers.get("authorization"):
        return 'Bearer error="invalid_token"'
    return "Bearer"


async def handle_execauth_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ExecauthError)
    if isinstance(exc, ServiceUnavailable | InternalError):
        log.warning("request %s failed: %s", request_id(request), exc.message)
    return render_error(request, exc)


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 in our error shape."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        allowed = allowed_methods(request)
        error: ExecauthError = MethodNotAllowed(
            f"{request.method} is not allowed here; allowed: {', '.join(allowed)}",
            headers={"Allow": ", ".join(allowed)},
        )
    elif exc.status_code == 404:
        error = NotFound(f"no such endpoint: {request.url.path}")
    else:
        error = ExecauthError(str(exc.detail))
        error.status = exc.status_code
    return render_error(request, error)


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path (RFC 9110 §15.5.6: ``Allow`` lists them all).

    Starlette answers 405 from the first route whose path matched, which knows only its
    own methods; a path is often served by several routes, one per method.
    """
    methods: set[str] = set()
    for route in request.app.router.routes:
        route_methods = getattr(route, "methods", None)
        if route_methods and route.matches(request.scope)[0] is not Match.NONE:
            methods.update(route_methods)
    return sorted(methods)


async def handle_database_error(request: Request, exc: Exception) -> Response:
    """A database that cannot be reached or written is 503 (retry later), not a 500.

    Anything else the database raises (a missing table, bad SQL) is a bug: re-raised
    to ``handle_unexpected`` (500, logged with its traceback).
    """
    assert isinstance(exc, SQLAlchemyError)
    if refuses_nul(exc):
        return render_error(request, InvalidRequest("the request holds U+0000 (NUL) in text"))
    if not is_unavailable(exc):
        raise exc
    # The driver's message only: SQLAlchemy's own text carries the statement's parameters.
    cause = exc.orig if isinstance(exc, DBAPIError) else exc
    reason = str(cause).partition("\n")[0]
    log.warning("request %s: the database is unavailable: %s", request_id(request), reason)
    return render_error(request, ServiceUnavailable("the database is unavailable; retry later"))


async def handle_unexpected(request: Request, exc: Exception) -> Response:
    """Anything unforeseen is a 500 ``internal_error``: never a decision."""
    log.exception("unhandled error in request %s", request_id(request), exc_info=exc)
    return render_error(request, InternalError("internal error; the request may be retried"))
