"""Who is using the console: sign-in with an admin or auditor key, then a session per request.

Signing in opens a server-side session (``store/web_sessions.py``) bound to the
secret that was presented; the cookie only points at it (``session.py``). Every
request re-reads the session and looks the key up by that secret's hash, then
applies the gateway's own test (``KeyMatch.is_usable``): a revoked or expired key,
a secret rotated out whose grace has ended, or a signed-out session gets no page.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from execauth.errors import Forbidden, Unauthorized
from execauth.serving.runtime import Runtime
from execauth.store.web_sessions import WebSession, WebSessionStore
from execauth.tenancy.api_keys import ApiKey, hash_secret
from execauth.tenancy.audit import key_actor
from execauth.tenancy.orgs import Org
from execauth.usecases.execute import ExecutionService
from execauth.web.rendering import Renderer
from execauth.web.session import (
    SESSION_COOKIE,
    SESSION_LIFETIME,
    SessionCodec,
    check_csrf,
    clear_session_cookie,
    new_session_id,
    read_form,
    session_hash,
)

READERS = ("admin", "auditor")
WRITERS = ("admin",)
LOGIN_PATH = "/console/login"


@dataclass(frozen=True, slots=True)
class Operator:
    """The signed-in key, its organization, its session's CSRF token and the session."""

    key: ApiKey
    org: Org
    csrf: str
    session_hash: str

    @property
    def is_admin(self) -> bool:
        return self.key.role == "admin"

    @property
    def actor(self) -> str:
        return key_actor(self.key.key_id)


OperatorHandler = Callable[[Request, Operator, dict[str, str]], Awaitable[Response]]
Handler = Callable[[Request], Awaitable[Response]]


class ConsoleAuth:
    def __init__(self, runtime: Runtime, service: ExecutionService, renderer: Renderer) -> None:
        # ``service`` signs in as the JSON API authenticates; the sessions are the web's own.
        self._service = service
        self._control = runtime.control
        self._secret = runtime.secret
        self._sessions = WebSessionStore(runtime.engine)
        self._renderer = renderer
        self.codec = SessionCodec(runtime.secret)

    async def sign_in(self, api_key: str) -> str:
        """Authenticate as the JSON API does, admit operator roles only, open a session.

        Returns the session cookie's value.
        """
        secret = api_key.strip()
        principal = await self._service.authenticate("Bearer " + secret)
        key = principal.api_key
        if key.role not in READERS:
            raise Forbidden(
                f"a key with role {key.role!r} cannot use the console "
                "(needs an admin or auditor key)"
            )
        now = self._service.clock()
        expires = now + SESSION_LIFETIME
        if key.expires_at is not None:
            expires = min(expires, key.expires_at)
        session_id = new_session_id()
        session = WebSession(
            session_hash(session_id), key.key_id, hash_secret(self._secret, secret), now, expires
        )
        await anyio.to_thread.run_sync(self._sessions.open_session, session)
        return self.codec.issue(session_id, expires)

    async def sign_out(self, operator: Operator) -> None:
        """End the session server-side: a saved copy of its cookie is worthless from now on."""
        await anyio.to_thread.run_sync(self._sessions.end_session, operator.session_hash)

    async def operator(self, request: Request) -> Operator | None:
        """The session's key, re-checked now; ``None`` when there is no usable session."""
        now = self._service.clock()
        claims = self.codec.read(request.cookies.get(SESSION_COOKIE), now)
        if claims is None:
            return None
        hashed = session_hash(claims.session_id)
        found = await anyio.to_thread.run_sync(self._signed_in, hashed, now)
        if found is None:
            return None
        key, org = found
        return Operator(key, org, self.codec.csrf_token(claims.session_id), hashed)

    def _signed_in(self, hashed: str, now: datetime) -> tuple[ApiKey, Org] | None:
        """The live session's key and org while the secret that opened it is still usable."""
        session = self._sessions.live_session(hashed, now)
        if session is None:
            return None
        # The gateway's lookup and test: the secret is the key's current one, or the
        # rotated-out one within its grace, and the key is neither revoked nor expired.
        match = self._control.api_key_by_secret_hash(session.secret_hash)
        if match is None or match.key.key_id != session.key_id or not match.is_usable(now):
            return None
        if match.key.role not in READERS:
            return None
        org = self._control.get_org(match.key.org_id)
        if org is None or org.disabled_at is not None:
            return None
        return match.key, org

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
