"""Routes of the public site (gateway surface): home, trust, integration guides.

The text comes from the project's docs (``site.py``); the one live part is the
public signing-key list. No page reads an organization or a secret.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from execauth.keyring import key_list_document
from execauth.serving.runtime import Runtime
from execauth.web.rendering import Renderer, page_route
from execauth.web.site import GUIDES, INTRODUCTION, QUICKSTART, TRUST, SiteDocs, guide


def site_pages(runtime: Runtime, renderer: Renderer) -> list[Route]:
    docs = SiteDocs()

    def render(template: str, path: str, **context: Any) -> Response:
        return renderer.page(template, {"path": path, "public_nav": True, **context})

    async def home(request: Request) -> Response:
        return render("site_home.html", "/", intro=docs.html((INTRODUCTION,)),
                      quickstart=docs.html(QUICKSTART))  # fmt: skip

    async def trust(request: Request) -> Response:
        """The live key list beside the docs on verifying receipts and checkpoints."""
        document = key_list_document(runtime.keyring.records, runtime.settings.issuer)
        return render("site_trust.html", "/trust", keys=document["keys"],
                      issuer=document["issuer"], body=docs.html(TRUST))  # fmt: skip

    async def guides(request: Request) -> Response:
        return render("site_guides.html", "/guides", guides=GUIDES)

    async def one_guide(request: Request) -> Response:
        shown = guide(request.path_params["slug"])
        return render("site_guide.html", request.url.path, guide=shown, guides=GUIDES,
                      body=docs.html(shown.parts))  # fmt: skip

    html = renderer.html_endpoint
    return [
        page_route("/", html(home), "GET"),
        page_route("/trust", html(trust), "GET"),
        page_route("/guides", html(guides), "GET"),
        page_route("/guides/{slug}", html(one_guide), "GET"),
    ]
