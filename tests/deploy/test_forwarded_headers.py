"""``EXECAUTH_FORWARDED_ALLOW_IPS``: whose X-Forwarded-Proto a real ``execauth serve`` believes.

Behind a proxy that terminates TLS the console's cookies must be ``Secure``, which the
service knows only from the proxy's ``X-Forwarded-Proto: https``. Anyone else sending that
header must not be believed — not even from 127.0.0.1, which uvicorn trusts by default.
(HAProxy in front of three instances is tested in ``test_topology``.)
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.serving import clean_env, free_port, running_service

pytestmark = pytest.mark.e2e

HTTPS = {"X-Forwarded-Proto": "https"}


def serve(tmp_path_factory: pytest.TempPathFactory, **settings: str) -> Iterator[str]:
    workdir: Path = tmp_path_factory.mktemp("forwarded")
    env = clean_env(
        EXECAUTH_DATABASE_URL=f"sqlite:///{workdir / 'execauth.db'}",
        EXECAUTH_SECRET_KEY=secrets.token_urlsafe(32),
        EXECAUTH_ADMIN_TOKEN="service_admin_" + secrets.token_urlsafe(32),
        **settings,
    )
    with running_service(env, workdir, free_port()) as url:
        yield url


@pytest.fixture(scope="module")
def untrusting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """No EXECAUTH_FORWARDED_ALLOW_IPS; uvicorn's own variable says "trust everyone"."""
    yield from serve(tmp_path_factory, FORWARDED_ALLOW_IPS="*")


@pytest.fixture(scope="module")
def behind_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve(tmp_path_factory, EXECAUTH_FORWARDED_ALLOW_IPS="127.0.0.1")


def login_cookie(url: str, headers: dict[str, str]) -> str:
    page = httpx.get(url + "/console/login", headers=headers)
    assert page.status_code == 200
    return page.headers["set-cookie"].lower()


def test_a_forwarded_https_from_an_untrusted_address_does_not_make_cookies_secure(
    untrusting: str,
) -> None:
    assert "secure" not in login_cookie(untrusting, HTTPS)


def test_a_forwarded_https_from_a_trusted_proxy_makes_cookies_secure(behind_proxy: str) -> None:
    assert "secure" in login_cookie(behind_proxy, HTTPS)


def test_plain_http_through_a_trusted_proxy_keeps_cookies_without_secure(
    behind_proxy: str,
) -> None:
    assert "secure" not in login_cookie(behind_proxy, {})
