"""Security and cache headers on every page and asset (CSP without inline code, nosniff)."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.web.conftest import Console

pytestmark = pytest.mark.anyio
CONSOLE_PAGES = [
    "/console/executions",
    "/console/keys",
    "/console/policies",
    "/console/policies/deploys",
    "/console/usage",
    "/console/audit",
]


def assert_secure(response: httpx.Response) -> None:
    csp = response.headers["content-security-policy"]
    assert "default-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    assert "unsafe-eval" not in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"


def assert_no_inline_code(html: str) -> None:
    """No inline <script>, no style attribute or <style>, no on* handlers: the CSP forbids them."""
    assert not re.search(r"<script(?![^>]*\bsrc=)", html)
    assert "<style" not in html
    assert not re.search(r"\sstyle=", html)
    assert not re.search(r"\son[a-z]+=", html)


@pytest.mark.parametrize("path", CONSOLE_PAGES)
async def test_every_console_page_has_a_strict_csp(console: Console, path: str) -> None:
    response = await console.client.get(path)
    assert response.status_code == 200, response.text
    assert_secure(response)
    assert_no_inline_code(response.text)
    assert response.headers["cache-control"] == "no-store"


@pytest.mark.parametrize(
    "path", ["/verify", "/console/login", "/console/nope-404", "/", "/trust", "/guides/python"]
)
async def test_public_pages_and_errors_have_a_strict_csp(
    client: httpx.AsyncClient, path: str
) -> None:
    response = await client.get(path)
    assert response.status_code in (200, 404)
    if response.status_code == 200:
        assert_secure(response)
        assert_no_inline_code(response.text)


async def test_the_verify_page_never_submits_the_receipt(client: httpx.AsyncClient) -> None:
    page = (await client.get("/verify")).text
    textarea = re.search(r"<textarea[^>]*>", page)
    assert textarea
    assert "name=" not in textarea.group(0)
    assert 'method="post"' not in page


async def test_redirects_and_errors_carry_the_headers(client: httpx.AsyncClient) -> None:
    redirect = await client.get("/console/executions")
    assert redirect.status_code == 303
    assert_secure(redirect)
    forbidden = await client.post("/console/login", data={"api_key": "x"})
    assert forbidden.status_code == 403
    assert_secure(forbidden)


async def test_assets_are_cached_with_an_etag(client: httpx.AsyncClient) -> None:
    page = (await client.get("/verify")).text
    href = re.search(r'href="(/static/console\.css\?v=[0-9a-f]+)"', page)
    assert href
    versioned = await client.get(href.group(1))
    assert versioned.status_code == 200
    assert "immutable" in versioned.headers["cache-control"]
    assert versioned.headers["content-type"].startswith("text/css")
    assert_secure(versioned)
    plain = await client.get("/static/receipt-verify.js")
    assert "max-age=" in plain.headers["cache-control"]
    assert plain.headers["content-type"].startswith("text/javascript")
    again = await client.get(
        "/static/receipt-verify.js", headers={"If-None-Match": plain.headers["etag"]}
    )
    assert again.status_code == 304
    assert (await client.get("/static/missing.js")).status_code == 404
