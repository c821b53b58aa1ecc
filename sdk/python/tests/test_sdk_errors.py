"""Error bodies of both wire profiles map to typed errors; profile B decisions are receipts."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from conftest import ScriptedService, Sleeps, receipt_for
from execauth_client import (
    Client,
    ExecauthError,
    Forbidden,
    InvalidRequest,
    QuotaExceeded,
    RateLimited,
    ServiceUnavailable,
    SurfaceNotFound,
    Unauthorized,
    UnexpectedResponse,
)

BODY = {"surface": "deploy.production", "actor": "release-bot", "idempotency_key": "k1"}

CASES: list[tuple[int, str, type[ExecauthError]]] = [
    (400, "invalid_request", InvalidRequest),
    (401, "unauthorized", Unauthorized),
    (403, "forbidden", Forbidden),
    (404, "surface_not_found", SurfaceNotFound),
    (409, "idempotency_conflict", InvalidRequest),
    (413, "payload_too_large", InvalidRequest),
    (429, "rate_limited", RateLimited),
    (429, "SERVICE_PLAN_LIMIT_EXCEEDED", QuotaExceeded),
    (500, "internal_error", ServiceUnavailable),
    (503, "service_unavailable", ServiceUnavailable),
]


def flat(code: str) -> dict[str, Any]:
    return {"error": code, "message": f"about {code}", "request_id": "req_1"}


def nested(code: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": f"about {code}", "request_id": "req_1"}}


def call(service: ScriptedService, response: httpx.Response) -> Any:
    service.script = [response]
    with Client(
        "https://execauth.test",
        "k",
        transport=httpx.MockTransport(service),
        max_retries=0,
        sleep=Sleeps(),
    ) as c:
        return c.authorize("deploy.production", actor="release-bot", idempotency_key="k1")


@pytest.mark.parametrize("profile", [flat, nested], ids=["profile-a", "profile-b"])
@pytest.mark.parametrize(("status", "code", "error"), CASES, ids=[c[1] for c in CASES])
def test_error_bodies_map_to_typed_errors(
    service: ScriptedService,
    profile: Any,
    status: int,
    code: str,
    error: type[ExecauthError],
) -> None:
    with pytest.raises(error) as raised:
        call(service, httpx.Response(status, json=profile(code)))
    assert type(raised.value) is error
    assert (raised.value.status, raised.value.code) == (status, code)
    assert raised.value.request_id == "req_1"
    assert f"about {code}" in str(raised.value)


@pytest.mark.parametrize(("status", "decision"), [(403, "DENY"), (422, "SILENCE")])
def test_profile_b_decisions_are_receipts_not_errors(
    service: ScriptedService, status: int, decision: str
) -> None:
    receipt = call(service, httpx.Response(status, json=receipt_for(BODY, decision)))
    assert receipt.decision == decision
    assert receipt.enforcement == "BLOCKED"


def test_a_profile_a_deny_is_a_receipt(service: ScriptedService) -> None:
    receipt = call(service, httpx.Response(200, json=receipt_for(BODY, "DENY")))
    assert receipt.decision == "DENY"
    assert receipt.policy_reason == "SERVICE_POLICY_WRONG_BRANCH"
    assert receipt.reason_code == "POLICY_VIOLATION"


def test_unknown_status_without_a_body_maps_by_status(service: ScriptedService) -> None:
    with pytest.raises(ServiceUnavailable) as raised:
        call(service, httpx.Response(502, text="bad gateway"))
    assert raised.value.code is None


def test_an_unknown_4xx_is_the_base_error(service: ScriptedService) -> None:
    with pytest.raises(ExecauthError) as raised:
        call(service, httpx.Response(418, json={"error": "teapot", "message": "no"}))
    assert type(raised.value) is ExecauthError


def test_200_without_a_receipt_is_unexpected(service: ScriptedService) -> None:
    with pytest.raises(UnexpectedResponse):
        call(service, httpx.Response(200, json={"hello": "world"}))


def test_all_errors_share_one_base() -> None:
    for _, _, error in CASES:
        assert issubclass(error, ExecauthError)
