"""Server-rendered HTML: the operator console (``/console/``) and the public ``/verify`` page."""

from execauth.web.routes import web_routes

__all__ = ["web_routes"]
