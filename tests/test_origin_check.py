"""A request for another origin than the issuer is logged once (docs/decisions.md)."""

from __future__ import annotations

import logging

import httpx
import pytest

from execauth.api.origin_check import MAX_REMEMBERED_HOSTS, authority

pytestmark = pytest.mark.anyio

WARNING = "but receipts name the issuer"


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if WARNING in r.getMessage()]


async def test_requests_for_the_issuers_origin_log_nothing(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="execauth.api"):
        await client.get("/healthz")
    assert warnings(caplog) == []


async def test_a_request_for_another_port_logs_a_warning_naming_both(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="execauth.api"):
        await client.get("/healthz", headers={"Host": "execauth.test:9000"})
    [message] = warnings(caplog)
    assert "execauth.test:9000" in message
    assert "https://execauth.test" in message
    assert "EXECAUTH_ISSUER" in message


async def test_another_origin_is_reported_once(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="execauth.api"):
        for _ in range(3):
            await client.get("/healthz", headers={"Host": "localhost:9000"})
    assert len(warnings(caplog)) == 1


async def test_remembered_hosts_are_bounded(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="execauth.api"):
        for n in range(MAX_REMEMBERED_HOSTS + 10):
            await client.get("/healthz", headers={"Host": f"h{n}.example"})
    assert len(warnings(caplog)) == MAX_REMEMBERED_HOSTS


async def test_the_warning_does_not_change_the_answer(client: httpx.AsyncClient) -> None:
    response = await client.get("/healthz", headers={"Host": "elsewhere:1"})
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("origin", "expected"),
    [
        ("http://127.0.0.1:8080", "127.0.0.1:8080"),
        ("https://Auth.Example.com:443", "auth.example.com"),
        ("http://auth.example.com:80/", "auth.example.com"),
        ("https://auth.example.com:8443", "auth.example.com:8443"),
        ("http://[::1]:9000", "[::1]:9000"),
    ],
)
def test_authority_drops_the_schemes_default_port(origin: str, expected: str) -> None:
    assert authority(origin) == expected
