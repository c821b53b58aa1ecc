"""Console sessions: a signed cookie that carries a random session id, never the key.

The cookie carries ``{session id, expiry}`` and an HMAC-SHA256 tag under a key
derived from the server secret (purpose ``web-session-v2``), so it cannot be
forged or altered. It is only a pointer to a row of ``web_sessions`` (found by the
id's SHA-256), which names the key and the secret that signed in; ``auth.py``
re-checks both on every request, and sign-out deletes the row. It is HttpOnly and
SameSite=Strict, and Secure when the request came over TLS.

CSRF: a session's token is an HMAC of its session id (purpose ``web-csrf-v1``), so
it is bound to that session: a new session, even in the same browser, has a new
token and the old one is refused. Every form carries it and every POST must echo
it (``check_csrf``). The sign-in form, which has no session yet, uses a
double-submit cookie instead.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import parse_qsl

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from execauth.errors import Forbidden, InvalidRequest, PayloadTooLarge
from execauth.server_secret import ServerSecret

SESSION_COOKIE = "execauth_console"
LOGIN_CSRF_COOKIE = "execauth_login_csrf"
SESSION_PURPOSE = "web-session-v2"  # v1 cookies (stateless) are void
CSRF_PURPOSE = "web-csrf-v1"
SESSION_LIFETIME = timedelta(hours=8)
CSRF_FIELD = "csrf_token"
MAX_FORM_BYTES = 256 * 1024  # a policy draft is the largest form


class SessionClaims(msgspec.Struct, frozen=True):
    session_id: str
    expires: int  # unix seconds


def new_session_id() -> str:
    """128 bits from the CSRNG; only its SHA-256 is stored (``session_hash``)."""
    return secrets.token_urlsafe(16)


def session_hash(session_id: str) -> str:
    """What the database keeps of a session id: reading the table yields no cookie."""
    return hashlib.sha256(session_id.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class SessionCodec:
    secret: ServerSecret

    def _tag(self, payload: bytes) -> bytes:
        return hmac.new(self.secret.derive(SESSION_PURPOSE), payload, hashlib.sha256).digest()

    def issue(self, session_id: str, expires: datetime) -> str:
        """The cookie value for ``session_id``, valid until ``expires`` at most."""
        payload = msgspec.json.encode(SessionClaims(session_id, int(expires.timestamp())))
        return _b64(payload) + "." + _b64(self._tag(payload))

    def read(self, cookie: str | None, now: datetime) -> SessionClaims | None:
        """The claims of a well-signed, unexpired cookie; ``None`` for anything else."""
        if not cookie or cookie.count(".") != 1:
            return None
        body, tag = cookie.split(".")
        try:
            payload, presented = _unb64(body), _unb64(tag)
        except (binascii.Error, ValueError):
            return None
        if not hmac.compare_digest(self._tag(payload), presented):
            return None
        try:
            claims = msgspec.json.decode(payload, type=SessionClaims)
        except msgspec.DecodeError:
            return None
        return claims if now.timestamp() < claims.expires else None

    def csrf_token(self, session_id: str) -> str:
        """The session's CSRF token: derived from its id, so it dies with the session."""
        key = self.secret.derive(CSRF_PURPOSE)
        return hmac.new(key, session_id.encode(), hashlib.sha256).hexdigest()[:32]


def set_session_cookie(response: Response, request: Request, value: str) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        value,
        max_age=int(SESSION_LIFETIME.total_seconds()),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_session_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(
        SESSION_COOKIE,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def set_login_csrf(response: Response, request: Request, token: str) -> None:
    """The sign-in form's double-submit token: the same value in a cookie and in the form."""
    response.set_cookie(
        LOGIN_CSRF_COOKIE,
        token,
        max_age=3600,
        path="/console/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def new_csrf_token() -> str:
    return secrets.token_hex(16)


async def read_form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (no multipart: nothing uploads files)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/x-www-form-urlencoded":
        raise InvalidRequest("forms must be sent as application/x-www-form-urlencoded")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise PayloadTooLarge(f"form exceeds {MAX_FORM_BYTES} bytes")
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError as exc:
        raise InvalidRequest("form is not UTF-8") from exc
    return dict(pairs)


def check_csrf(expected: str | None, form: dict[str, str]) -> None:
    """403 unless the form echoes the expected token."""
    presented = form.get(CSRF_FIELD, "")
    # compare_digest refuses str with non-ASCII characters (TypeError, a 500), and either
    # side may hold any text a client sent (the sign-in form's token comes from a cookie):
    # compare the UTF-8 bytes, so a non-ASCII token is simply a wrong one.
    if (
        not expected
        or not presented
        or not hmac.compare_digest(
            expected.encode("utf-8", "surrogatepass"), presented.encode("utf-8", "surrogatepass")
        )
    ):
        raise Forbidden("the form's CSRF token is missing or wrong; reload the page and retry")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
