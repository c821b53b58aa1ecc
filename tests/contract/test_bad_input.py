"""Bad input answers 4xx, never 500; requests that must be refused are (docs/decisions.md).

One class of bad input per test, on both databases: bodies (Content-Type, UTF-8,
duplicate keys, U+0000), parameters (integers and timestamps through the one parser),
a client gone mid-body, and 405's ``Allow``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, MutableMapping
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from tests.conftest import ADMIN, Tenant, make_tenant, sequence

pytestmark = pytest.mark.anyio

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
JSON = {"Content-Type": "application/json"}


def assert_400_naming(response: httpx.Response, name: str) -> None:
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_request"
    assert name in response.json()["message"]


async def operator(client: httpx.AsyncClient) -> Tenant:
    return await make_tenant(client, role="admin")


# ---- 1. invalid UTF-8 ---------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/v1/execute", "/protocol/verify-receipt", "/protocol/verify-signature"]
)
async def test_invalid_utf8_in_a_json_body_is_400(
    client: httpx.AsyncClient, tenant: Tenant, path: str
) -> None:
    body = b'{"surface": "deploy.production", "actor": "\xff\xfe"}'
    response = await client.post(path, content=body, headers={**tenant.auth, **JSON})
    assert_400_naming(response, "UTF-8")


async def test_invalid_utf8_in_a_key_of_a_console_body_is_400(client: httpx.AsyncClient) -> None:
    body = b'{"name\xc3": "Acme"}'
    response = await client.post("/console/v1/orgs", content=body, headers={**ADMIN, **JSON})
    assert_400_naming(response, "UTF-8")


# ---- 3. a client gone mid-body ------------------------------------------------------


async def test_a_client_gone_mid_body_is_no_500_no_traceback_and_counted_apart(
    client: httpx.AsyncClient, tenant: Tenant, caplog: pytest.LogCaptureFixture
) -> None:
    app = client._transport.app  # type: ignore[attr-defined]
    assert isinstance(app, Starlette)
    messages: Iterator[dict[str, Any]] = iter(
        [
            {"type": "http.request", "body": b'{"surface": "deploy.', "more_body": True},
            {"type": "http.disconnect"},
        ]
    )
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return next(messages)

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    headers = [(b"authorization", tenant.auth["Authorization"].encode())]
    headers.append((b"content-type", b"application/json"))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "https",
        "path": "/v1/execute",
        "raw_path": b"/v1/execute",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "server": ("execauth.test", 443),
        "state": {},
    }
    with caplog.at_level(logging.WARNING):
        await app(scope, receive, send)
    assert sent[0]["status"] == 499
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    metrics = (await client.get("/metrics")).text
    assert 'execauth_execute_responses_total{status="499"} 1.0' in metrics
    assert 'status="500"' not in metrics


# ---- 4. integers through the one parser ---------------------------------------------


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("limit=²", "limit"),
        ("limit=١٢", "limit"),  # Arabic-Indic digits: int() would accept them
        ("limit=" + "9" * 5000, "limit"),
        ("limit=99999999999999999999", "limit"),
        ("limit=0", "limit"),
    ],
)
async def test_a_page_size_int_refuses_is_400_naming_it(
    client: httpx.AsyncClient, query: str, name: str
) -> None:
    tenant = await operator(client)
    response = await client.get(f"/operator/executions?{query}", headers=tenant.auth)
    assert_400_naming(response, name)


@pytest.mark.parametrize(
    "query", ["from=²&to=1", "from=1&to=" + "1" * 5000, "from=1&to=99999999999999999999"]
)
async def test_a_log_size_int_refuses_is_400_naming_it(
    client: httpx.AsyncClient, tenant: Tenant, query: str
) -> None:
    assert (await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)).is_success
    sequence(client)
    response = await client.get(f"/operator/log/consistency?{query}", headers=tenant.auth)
    assert response.status_code == 400, response.text
    assert "from" in response.json()["message"] or "to" in response.json()["message"]


@pytest.mark.parametrize("version", ["99999999999999999999", "2147483648", "²", "0"])
async def test_a_policy_version_the_database_cannot_hold_is_400(
    client: httpx.AsyncClient, tenant: Tenant, version: str
) -> None:
    response = await client.get(
        f"/console/v1/orgs/{tenant.org_id}/policies/deploys?version={version}", headers=ADMIN
    )
    assert_400_naming(response, "version")


async def test_a_cursor_holding_a_huge_integer_is_400(client: httpx.AsyncClient) -> None:
    from execauth.api.pagination import encode_cursor

    tenant = await operator(client)
    cursor = encode_cursor(10**30, "service_exec_x")
    response = await client.get(f"/operator/executions?cursor={cursor}", headers=tenant.auth)
    assert_400_naming(response, "cursor")


@pytest.mark.parametrize("grace", [2**63, 2**64 + 1, -1, 10**9])
async def test_a_rotation_grace_out_of_range_is_400_naming_it(
    client: httpx.AsyncClient, tenant: Tenant, grace: int
) -> None:
    path = f"/console/v1/orgs/{tenant.org_id}/keys/{tenant.key_id}/rotate"
    body = f'{{"grace_seconds": {grace}}}'.encode()
    response = await client.post(path, content=body, headers={**ADMIN, **JSON})
    assert_400_naming(response, "grace_seconds")


# ---- 5. timestamps at the edge of the range -----------------------------------------


@pytest.mark.parametrize("path", ["/operator/executions", "/operator/audit"])
@pytest.mark.parametrize(
    "since", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "2026-01-01T00:00:00"]
)
async def test_a_since_outside_the_utc_range_is_400_naming_it(
    client: httpx.AsyncClient, path: str, since: str
) -> None:
    tenant = await operator(client)
    response = await client.get(path, params={"since": since}, headers=tenant.auth)
    assert_400_naming(response, "since")


async def test_an_expiry_past_year_9999_in_utc_is_400_naming_it(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    body = {"name": "late", "expires_at": "9999-12-31T23:59:59-01:00"}
    response = await client.post(f"/console/v1/orgs/{tenant.org_id}/keys", json=body, headers=ADMIN)
    assert_400_naming(response, "expires_at")


async def test_a_replay_range_outside_the_utc_range_is_400_naming_it(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    body = {"since": "0001-01-01T00:00:00+01:00"}
    path = f"/console/v1/orgs/{tenant.org_id}/replay"
    response = await client.post(path, json=body, headers=ADMIN)
    assert_400_naming(response, "since")


# ---- 6. U+0000, which PostgreSQL cannot store ---------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {**PERMIT, "actor": "release-\u0000bot"},
        {**PERMIT, "request_id": "k\u0000"},
        {**PERMIT, "payload": {"nested": ["x\u0000"]}},
        {**PERMIT, "payload": {"key\u0000": 1}},
    ],
    ids=["actor", "request_id", "nested-value", "key"],
)
async def test_a_nul_character_in_an_execute_body_is_400_before_evaluation(
    client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any]
) -> None:
    response = await client.post("/v1/execute", json=body, headers=tenant.auth)
    assert_400_naming(response, "U+0000")
    text = (await client.get("/metrics")).text
    assert "execauth_decisions_total{" not in text  # nothing was evaluated


async def test_a_nul_character_in_a_console_body_is_400(client: httpx.AsyncClient) -> None:
    response = await client.post("/console/v1/orgs", json={"name": "Ac\u0000me"}, headers=ADMIN)
    assert_400_naming(response, "U+0000")


async def test_a_nul_character_in_a_query_filter_is_400(client: httpx.AsyncClient) -> None:
    tenant = await operator(client)
    response = await client.get("/operator/executions?actor=a%00b", headers=tenant.auth)
    assert_400_naming(response, "actor")


async def test_an_escaped_backslash_before_u0000_is_not_a_nul(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    body = b'{"surface": "deploy.staging", "payload": {"amount": 2, "s": "\\\\u0000"}}'
    response = await client.post("/v1/execute", content=body, headers={**tenant.auth, **JSON})
    assert response.status_code == 200, response.text


# ---- 7. duplicate object keys -------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b'{"surface": "deploy.production", "actor": "attacker", "actor": "release-bot",'
        b' "context": {"branch": "main"}}',
        b'{"surface": "deploy.production", "actor": "release-bot",'
        b' "context": {"branch": "dev", "branch": "main"}}',
        b'{"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"},'
        b' "payload": {"steps": [{"a": 1, "a": 2}]}}',
        b'{"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"},'
        b' "payload": {"x": "\\u003a", "y": 1, "y": 2}}',
        b'{"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"},'
        b' "payload": {"a:b": "c:d", "e": {"f": 1}, "e": {"f": 1}}}',
    ],
    ids=["top-level", "nested-object", "inside-an-array", "with-escaped-colons", "same-value"],
)
async def test_duplicate_object_keys_at_any_depth_are_400(
    client: httpx.AsyncClient, tenant: Tenant, body: bytes
) -> None:
    response = await client.post("/v1/execute", content=body, headers={**tenant.auth, **JSON})
    assert_400_naming(response, "same key twice")


@pytest.mark.parametrize(
    "body",
    [
        b'{"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main",'
        b' "at": "12:00:00", "image": "registry/app@sha256:ab"}, "payload": {"k:": ":"}}',
        b'{"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"},'
        b' "payload": {"x": "\\u003a\\u003A", "y": {"y": "y"}}}',
    ],
    ids=["colons-in-strings", "escaped-colons"],
)
async def test_colons_inside_strings_are_not_taken_for_duplicate_keys(
    client: httpx.AsyncClient, tenant: Tenant, body: bytes
) -> None:
    response = await client.post("/v1/execute", content=body, headers={**tenant.auth, **JSON})
    assert response.status_code == 200, response.text
    assert response.json()["decision"] == "PERMIT"


async def test_duplicate_keys_are_refused_on_console_routes_too(client: httpx.AsyncClient) -> None:
    body = b'{"name": "Acme", "plan": "enterprise", "plan": "free"}'
    response = await client.post("/console/v1/orgs", content=body, headers={**ADMIN, **JSON})
    assert_400_naming(response, "same key twice")


# ---- 8. Content-Type ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain", b'{"surface": "deploy.production", "actor": "release-bot"}'),
        ("application/x-www-form-urlencoded", b'{"surface": "deploy.production"}'),
        ("multipart/form-data; boundary=x", b'{"surface": "deploy.production"}'),
        ("application/jsonx", b'{"surface": "deploy.production"}'),
        (None, b'{"surface": "deploy.production"}'),
    ],
)
async def test_a_body_that_is_not_declared_json_is_415(
    client: httpx.AsyncClient, tenant: Tenant, content_type: str | None, body: bytes
) -> None:
    headers = {**tenant.auth, **({"Content-Type": content_type} if content_type else {})}
    permit = body.replace(b"}", b', "context": {"branch": "main"}}')
    response = await client.post("/v1/execute", content=permit, headers=headers)
    assert response.status_code == 415, response.text
    assert response.json()["error"] == "unsupported_media_type"


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON",
        "application/x+json",
    ],
)
async def test_json_media_types_are_accepted(
    client: httpx.AsyncClient, tenant: Tenant, content_type: str
) -> None:
    body = (
        b'{"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}'
    )
    response = await client.post(
        "/v1/execute", content=body, headers={**tenant.auth, "Content-Type": content_type}
    )
    assert response.status_code == 200, response.text


async def test_a_console_body_that_is_not_declared_json_is_415(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/console/v1/orgs",
        content=b'{"name": "Acme"}',
        headers={**ADMIN, "Content-Type": "text/plain"},
    )
    assert response.status_code == 415, response.text


# ---- 14. the log routes take any key of the organization ---------------------------


async def test_an_execute_key_reads_its_own_logs_checkpoint_and_consistency(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    # Decided in docs/decisions.md: the proof route already hands an execute key the same
    # signed checkpoint, so the log routes add nothing it could not see.
    for _ in range(2):
        assert (await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)).is_success
    sequence(client)
    checkpoint = await client.get("/operator/log/checkpoint", headers=tenant.auth)
    assert checkpoint.status_code == 200, checkpoint.text
    consistency = await client.get("/operator/log/consistency?from=1&to=2", headers=tenant.auth)
    assert consistency.status_code == 200, consistency.text


async def test_an_execute_key_still_cannot_read_the_operator_executions(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await client.get("/operator/executions", headers=tenant.auth)
    assert response.status_code == 403


# ---- 15. 405 lists every method of the path ---------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("DELETE", "/console/v1/orgs", {"GET", "HEAD", "POST"}),
        ("PUT", "/operator/keys", {"GET", "HEAD", "POST"}),
        ("POST", "/console/v1/orgs/org_x/policies/p", {"GET", "HEAD", "PUT"}),
        ("GET", "/v1/execute", {"POST"}),
    ],
)
async def test_405_allow_lists_every_method_the_path_serves(
    client: httpx.AsyncClient, method: str, path: str, allowed: set[str]
) -> None:
    response = await client.request(method, path, headers=ADMIN)
    assert response.status_code == 405, response.text
    assert {m.strip() for m in response.headers["allow"].split(",")} == allowed


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/operator/executions/a%00b"),
        ("GET", "/v1/receipts/a%00b/proof"),
        ("POST", "/operator/keys/a%00b/rotate"),
    ],
)
async def test_a_nul_character_in_a_path_parameter_is_4xx_never_500(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    tenant = await operator(client)
    response = await client.request(method, path, headers=tenant.auth)
    # SQLite stores U+0000 and finds nothing (404); PostgreSQL's driver refuses it (400).
    assert response.status_code in (400, 404), response.text
