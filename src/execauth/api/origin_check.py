"""A warning when requests arrive for another origin than the issuer receipts name.

The issuer is written into every receipt and names the Merkle logs; a service reached
at another address (``make serve PORT=9000`` with an issuer still saying 8080, a proxy
in front under another name) signs receipts that point elsewhere. Nothing is refused:
the service cannot know every name it is rightly reached by, so it says so once per
address and leaves the decision to the operator (docs/decisions.md, "The issuer follows").
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("execauth.api")
# Host headers are the client's to choose: remember a bounded number of them.
MAX_REMEMBERED_HOSTS = 64
DEFAULT_PORTS = {"http": ":80", "https": ":443"}


def authority(origin: str) -> str:
    """``host[:port]`` of a URL, lower case, without its scheme's default port."""
    parts = urlsplit(origin)
    netloc = parts.netloc.lower()
    return netloc.removesuffix(DEFAULT_PORTS.get(parts.scheme, "\0"))


class IssuerOriginCheck:
    """ASGI middleware: log a warning the first time a Host differs from the issuer's."""

    def __init__(self, app: ASGIApp, issuer: str) -> None:
        self.app = app
        self.issuer = issuer
        self.expected = authority(issuer)
        self.seen: set[bytes] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self._check(scope)
        await self.app(scope, receive, send)

    def _check(self, scope: Scope) -> None:
        host = next((value for name, value in scope["headers"] if name == b"host"), None)
        if host is None or host in self.seen or len(self.seen) >= MAX_REMEMBERED_HOSTS:
            return
        self.seen.add(host)
        scheme = scope.get("scheme", "http")
        arrived = host.decode("latin-1").lower().removesuffix(DEFAULT_PORTS.get(scheme, "\0"))
        if arrived != self.expected:
            log.warning(
                "requests arrive for %s://%s but receipts name the issuer %s; set "
                "EXECAUTH_ISSUER to the URL clients use (docs/operations.md)",
                scheme, arrived, self.issuer,
            )  # fmt: skip
