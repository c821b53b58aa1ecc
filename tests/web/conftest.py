"""Web console fixtures: sign in through the real form, then browse with the session cookie."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

import httpx
import pytest
from starlette.applications import Starlette

from tests.operator.conftest import Operators, make_operators

CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]+)"')


def csrf_of(html: str) -> str:
    match = CSRF.search(html)
    assert match, "page has no CSRF token"
    return match.group(1)


async def sign_in(client: httpx.AsyncClient, api_key: str) -> httpx.Response:
    """Submit the sign-in form with ``api_key``; the answer (303 on success) is returned."""
    form = await client.get("/console/login")
    assert form.status_code == 200, form.text
    return await client.post(
        "/console/login", data={"csrf_token": csrf_of(form.text), "api_key": api_key}
    )


def secret_of(headers: dict[str, str]) -> str:
    return headers["Authorization"].removeprefix("Bearer ")


@dataclass
class Console:
    """A signed-in admin session on ``client`` (its cookie jar holds the session)."""

    client: httpx.AsyncClient
    ops: Operators

    async def csrf(self, path: str = "/console/keys") -> str:
        page = await self.client.get(path)
        assert page.status_code == 200, page.text
        return csrf_of(page.text)

    async def post(self, path: str, data: dict[str, str]) -> httpx.Response:
        return await self.client.post(path, data={"csrf_token": await self.csrf(), **data})


@pytest.fixture
async def ops(client: httpx.AsyncClient) -> Operators:
    return await make_operators(client)


@pytest.fixture
async def console(client: httpx.AsyncClient, ops: Operators) -> Console:
    signed_in = await sign_in(client, secret_of(ops.admin))
    assert signed_in.status_code == 303, signed_in.text
    return Console(client, ops)


class Clock:
    """The app's clock, moved by the test, so grace periods and sessions end without sleeping."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock(client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Stop the clock of ``client``'s app at the present; the test moves ``clock.now``."""
    app = client._transport.app  # type: ignore[attr-defined]
    assert isinstance(app, Starlette)
    service = app.state.service
    frozen = Clock(service.clock())
    monkeypatch.setattr(service, "clock", frozen)
    return frozen
