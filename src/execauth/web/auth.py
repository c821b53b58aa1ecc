"""Who is using the console: sign-in with an admin or auditor key, then a session per request.

The session cookie only names the key (``session.py``); here every request
re-reads that key through the control store, so a revoked, expired or
re-roled key loses its console at once, like it loses the JSON API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from execauth.errors import Forbidden, Unauthorized
from execauth.service import ExecutionService
from execauth.tenancy.api_keys import ApiKey
from execauth.tenancy.audit import key_actor
from execauth.tenancy.orgs import Org
from execauth.web.rendering import Renderer
from execauth.web.session import (
    SESSION_COOKIE,
    SessionCodec,
    check_csrf,
    clear_session_cookie,
    read_form,
)

READERS = ("admin", "auditor")
WRITERS = ("admin",)
LOGIN_PATH = "/console/login"


@dataclass(frozen=True, slots=True)
class Operator:
    """The signed-in key, its organization and its session's CSRF token."""

    key: ApiKey
    org: Org
    csrf: str

    @property
    def is_admin(self) -> bool:
        return self.key.role == "admin"

    @property
    def actor(self) -> str:
        return key_actor(self.key.key_id)


OperatorHandler = Callable[[Request, Operator, dict[str, str]], Awaitable[Response]]
Handler = Callable[[Request], Awaitable[Response]]


class ConsoleAuth:
    def __init__(self, service: ExecutionService, renderer: Renderer) -> None:
        self._service = service
        self._control = service.runtime.control
        self._renderer = renderer
        self.codec = SessionCodec(service.runtime.secret)

    async def sign_in(self, api_key: str) -> tuple[ApiKey, Org]:
        """The same authentication as the JSON API, then the operator roles only."""
        principal = await self._service.authenticate("Bearer " + api_key.strip())
        if principal.api_key.role not in READERS:
            raise Forbidden(
                f"a key with role {principal.api_key.role!r} cannot use the console "
                "(needs an admin or auditor key)"
            )
        return principal.api_key, principal.org

    async def operator(self, request: Request) -> Operator | None:
        """The session's key, re-checked now; ``None`` when there is no usable session."""
        now = self._service.clock()
        claims = self.codec.read(request.cookies.get(SESSION_COOKIE), now)
        if claims is None:
            return None
        key = await anyio.to_thread.run_sync(
            self._control.get_api_key, claims.org_id, claims.key_id
        )
        if key is None or not key.is_usable(now) or key.role not in READERS:
            return None
        org = await anyio.to_thread.run_sync(self._control.get_org, claims.org_id)
        if org is None or org.disabled_at is not None:
            return None
        return Operator(key, org, claims.csrf)

    def page(self, roles: tuple[str, ...] = READERS) -> Callable[[OperatorHandler], Handler]:
        """Guard a console handler: a live session, a role in ``roles``, CSRF on POST."""

        def wrap(handler: OperatorHandler) -> Handler:
            async def guarded(request: Request) -> Response:
                operator = await self.operator(request)
                if operator is None:
                    if request.method != "GET":
                        raise Unauthorized("your console session has ended; sign in again")
                    response: Response = RedirectResponse(LOGIN_PATH, 303)
                    if SESSION_COOKIE in request.cookies:
                        clear_session_cookie(response, request)
                    return response
                form: dict[str, str] = {}
                if request.method == "POST":
                    form = await read_form(request)
                    check_csrf(operator.csrf, form)
                if operator.key.role not in roles:
                    raise Forbidden("this needs an admin key; auditors can only read")
                return await handler(request, operator, form)

            return self._renderer.html_endpoint(guarded)

        return wrap
