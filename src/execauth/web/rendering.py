"""HTML responses for the web console and ``/verify``: templates, headers, assets, error pages.

Every page and asset leaves through ``page`` / ``asset`` / ``html_endpoint`` so the
security headers (a strict CSP without inline script or style, nosniff, no
referrer, no framing) are set in one place. Errors raised by a page handler are
rendered here as an HTML error page with the error's own status.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from execauth.errors import ExecauthError, InternalError
from execauth.web.readable import detail_items
from execauth.wire_time import format_timestamp

log = logging.getLogger("execauth.web")
Handler = Callable[[Request], Awaitable[Response]]

# No inline script or style anywhere (templates use classes and static modules only).
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; form-action 'self'; base-uri 'none'; "
    "object-src 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}
PAGE_CACHE = "no-store"  # pages show org data (and once, a key's secret)
ASSET_CACHE = "public, max-age=3600"
IMMUTABLE_CACHE = "public, max-age=31536000, immutable"  # the URL carries the content hash
STATIC_PREFIX = "/static/"
_MEDIA_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    media_type: str
    digest: str  # first 16 hex of SHA-256: the ETag and the cache-busting version


def load_assets() -> dict[str, Asset]:
    """Every file of ``execauth/web/static``, read once at start-up."""
    assets: dict[str, Asset] = {}
    for entry in resources.files("execauth.web").joinpath("static").iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if not entry.is_file() or suffix not in _MEDIA_TYPES:
            continue
        body = entry.read_bytes()
        assets[entry.name] = Asset(
            body, _MEDIA_TYPES[suffix], hashlib.sha256(body).hexdigest()[:16]
        )
    return assets


def display_time(value: datetime | str | None) -> str:
    """Timestamps as the wire shows them (UTC, milliseconds)."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return format_timestamp(value.astimezone(UTC))


def short_time(value: datetime | str | None) -> str:
    """A wire timestamp to the second, for narrow table cells (the column says UTC)."""
    text = display_time(value)
    if len(text) >= 19 and text[10] == "T":
        return text[:10] + " " + text[11:19]
    return text


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


class Renderer:
    """Jinja2 templates (autoescaped) and the static assets they reference."""

    def __init__(self) -> None:
        self.assets = load_assets()
        self.env = Environment(
            loader=PackageLoader("execauth.web", "templates"),
            autoescape=select_autoescape(["html", "svg"]),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.globals["static"] = self.static_url
        self.env.filters["when"] = display_time
        self.env.filters["pretty"] = pretty_json
        self.env.filters["details"] = detail_items
        self.env.filters["short_time"] = short_time

    def static_url(self, name: str) -> str:
        asset = self.assets[name]
        return f"{STATIC_PREFIX}{name}?v={asset.digest}"

    def page(
        self,
        template: str,
        context: Mapping[str, Any],
        status: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        defaults = {"operator": None, "path": "", "public_nav": False}
        body = self.env.get_template(template).render({**defaults, **context})
        response = Response(body, status, media_type="text/html; charset=utf-8")
        response.headers["Cache-Control"] = PAGE_CACHE
        response.headers.update(headers or {})
        secure(response)
        return response

    def error_page(self, status: int, title: str, message: str) -> Response:
        return self.page("error.html", {"title": title, "message": message}, status)

    async def asset(self, request: Request) -> Response:
        """``GET /static/{name}``: ETag, revalidation, and long caching for hashed URLs."""
        asset = self.assets.get(request.path_params["name"])
        if asset is None:
            return self.error_page(404, "Not found", "No such asset.")
        etag = f'"{asset.digest}"'
        versioned = request.query_params.get("v") == asset.digest
        headers = {"ETag": etag, "Cache-Control": IMMUTABLE_CACHE if versioned else ASSET_CACHE}
        if etag in request.headers.get("if-none-match", ""):
            response = Response(status_code=304, headers=headers)
        else:
            response = Response(asset.body, headers=headers, media_type=asset.media_type)
        secure(response)
        return response

    def html_endpoint(self, handler: Handler) -> Handler:
        """Run a page handler; an error becomes an HTML page with its own status."""

        async def endpoint(request: Request) -> Response:
            try:
                response = await handler(request)
            except ExecauthError as exc:
                if isinstance(exc, InternalError):
                    log.warning("web request failed: %s", exc.message)
                response = self.error_page(
                    exc.status, _TITLES.get(exc.status, "Error"), exc.message
                )
            except HTTPException as exc:
                response = self.error_page(exc.status_code, "Error", str(exc.detail))
            secure(response)
            return response

        return endpoint


_TITLES = {
    400: "That request was not valid",
    401: "Please sign in",
    403: "Not allowed",
    404: "Not found",
    409: "Conflict",
    413: "Too large",
    429: "Slow down",
}


def page_route(path: str, endpoint: Handler, method: str) -> Route:
    """A route to an HTML page or asset: not part of the JSON API's OpenAPI document."""
    return Route(path, endpoint, methods=[method], include_in_schema=False)


def secure(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response
