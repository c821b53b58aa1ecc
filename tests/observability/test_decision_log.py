"""The decision log (issue 20, item 1): one line per execute request, its fields, and what never
appears in it. An in-process app on SQLite (the log does not depend on the store), its
``execauth.decisions`` lines captured as the JSON the service writes."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from execauth.api.execute_endpoint import ExecuteAnswer
from execauth.config import PlanSettings, Settings
from execauth.errors import RateLimited
from execauth.observability.decision_log import DecisionLog
from execauth.observability.logs import DECISION_LOGGER, DecisionJsonFormatter
from tests.conftest import Database, Tenant, make_tenant, small_plans

pytestmark = pytest.mark.anyio

POLICY = """
surfaces:
  - match: deploy.production
    require: [context.branch]
    rules:
      - id: main-only
        permit: context.branch == "main"
        ttl: 10m
      - id: wrong-branch
        deny: context.branch != "main"
        reason: SERVICE_POLICY_WRONG_BRANCH
  - match: deploy.approved
    rules:
      - id: needs-approval
        escalate: "true"
        approvers: {roles: [admin]}
        quorum: 1
        approval_ttl: 30m
        ttl: 5m
"""
# A value that must never reach the log unless the operator asks for the request's data.
PRIVATE = "private-marker-7f3a"
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def database(tmp_path: Path) -> Database:
    return Database(f"sqlite:///{tmp_path / 'execauth.db'}", None)


@pytest.fixture
def log_request_data() -> bool:
    return False


@pytest.fixture
def settings(settings: Settings, log_request_data: bool) -> Settings:
    return settings.model_copy(update={"decision_log_context": log_request_data})


Lines = Callable[[], list[dict[str, Any]]]


@pytest.fixture
def lines() -> Iterator[Lines]:
    """Reads every line the decision logger wrote so far in the test, decoded."""
    logger = logging.getLogger(DECISION_LOGGER)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(DecisionJsonFormatter())
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield lambda: [msgspec.json.decode(line) for line in stream.getvalue().splitlines()]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


@pytest.fixture
async def tenant(client: httpx.AsyncClient) -> Tenant:
    return await make_tenant(client, policy=POLICY)


async def execute(
    client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any], **headers: str
) -> httpx.Response:
    return await client.post("/v1/execute", json=body, headers={**tenant.auth, **headers})


def production(branch: str) -> dict[str, Any]:
    return {
        "surface": "deploy.production",
        "action": "deploy",
        "actor": f"release-{PRIVATE}",
        "context": {"branch": branch, "note": PRIVATE},
        "payload": {"ticket": PRIVATE},
    }


async def test_a_permit_is_one_line_naming_org_key_rule_receipt_and_execution(
    client: httpx.AsyncClient, tenant: Tenant, lines: Lines
) -> None:
    response = await execute(client, tenant, production("main"))
    receipt = response.json()
    assert receipt["decision"] == "PERMIT"
    [line] = lines()
    assert TIME.match(line["time"])
    assert isinstance(line["latency_ms"], float)
    assert {k: v for k, v in line.items() if k not in ("time", "latency_ms", "process")} == {
        "logger": "execauth.decisions",
        "event": "decision",
        "status": 200,
        "request_id": response.headers["x-request-id"],
        "org_id": tenant.org_id,
        "key_id": tenant.key_id,
        "surface": "deploy.production",
        "action": "deploy",
        "decision": "PERMIT",
        "policy_id": receipt["policy_id"],
        "policy_version": receipt["policy_version"],
        "rule_id": "main-only",
        "receipt_id": receipt["receipt_id"],
        "execution_id": receipt["execution_id"],
        "signing_key_id": receipt["key_id"],
        "repeated": False,
    }


async def test_a_deny_carries_its_rule_and_reason_codes(
    client: httpx.AsyncClient, tenant: Tenant, lines: Lines
) -> None:
    await execute(client, tenant, production("feature"))
    [line] = lines()
    assert (line["decision"], line["rule_id"]) == ("DENY", "wrong-branch")
    assert (line["reason_code"], line["reason"]) == (
        "POLICY_VIOLATION",
        "SERVICE_POLICY_WRONG_BRANCH",
    )


async def test_a_silence_is_logged_with_its_reason(
    client: httpx.AsyncClient, tenant: Tenant, lines: Lines
) -> None:
    response = await execute(client, tenant, {"surface": "deploy.production", "context": {}})
    [line] = lines()
    assert line["decision"] == "SILENCE"
    assert line["reason"] == response.json()["reasonCode"]


async def test_an_escalate_names_its_approval(
    client: httpx.AsyncClient, tenant: Tenant, lines: Lines
) -> None:
    response = await execute(client, tenant, {"surface": "deploy.approved"})
    [line] = lines()
    assert line["decision"] == "ESCALATE"
    assert line["approval_id"] == response.json()["approval_id"]


async def test_an_idempotent_repeat_is_marked_repeated_with_the_original_receipt(
    client: httpx.AsyncClient, tenant: Tenant, lines: Lines
) -> None:
    first = await execute(client, tenant, production("main"), **{"Idempotency-Key": "job-1"})
    await execute(client, tenant, production("main"), **{"Idempotency-Key": "job-1"})
    original, repeat = lines()
    assert (original["repeated"], repeat["repeated"]) == (False, True)
    assert repeat["receipt_id"] == first.json()["receipt_id"]
    assert repeat["idempotency_key"] == "job-1"


async def test_a_request_without_a_key_is_a_refusal_line_with_status_and_error_code(
    client: httpx.AsyncClient, lines: Lines
) -> None:
    response = await client.post("/v1/execute", json={"surface": "deploy.production"})
    [line] = lines()
    assert response.status_code == 401
    assert {k: line[k] for k in ("event", "status", "error", "request_id")} == {
        "event": "refusal",
        "status": 401,
        "error": "unauthorized",
        "request_id": response.headers["x-request-id"],
    }
    assert "decision" not in line
    assert "org_id" not in line


async def test_a_malformed_body_is_a_refusal_line_naming_org_and_key(
    client: httpx.AsyncClient, tenant: Tenant, lines: Lines
) -> None:
    await client.post(
        "/v1/execute",
        content=b"{not json",
        headers={**tenant.auth, "Content-Type": "application/json"},
    )
    [line] = lines()
    assert (line["event"], line["status"], line["error"]) == ("refusal", 400, "invalid_request")
    assert (line["org_id"], line["key_id"]) == (tenant.org_id, tenant.key_id)


@pytest.mark.parametrize("plans", [small_plans(per_minute=1)])
async def test_a_rate_limited_request_is_a_refusal_line(
    client: httpx.AsyncClient,
    tenant: Tenant,
    lines: Lines,
    plans: dict[str, PlanSettings],
) -> None:
    await execute(client, tenant, production("main"))
    limited = await execute(client, tenant, production("main"))
    assert limited.status_code == RateLimited.status
    refusal = lines()[-1]
    assert (refusal["event"], refusal["status"], refusal["error"]) == (
        "refusal",
        429,
        "rate_limited",
    )


async def test_no_secret_authorization_header_or_request_data_by_default(
    client: httpx.AsyncClient, tenant: Tenant, lines: Lines
) -> None:
    await execute(client, tenant, production("main"))
    await client.post(
        "/v1/execute", json=production("main"), headers={"Authorization": "Bearer " + PRIVATE}
    )
    text = msgspec.json.encode(lines()).decode()
    assert len(lines()) == 2
    assert tenant.api_key not in text
    assert tenant.api_key.split("_")[-1] not in text
    assert "Bearer" not in text
    assert "uthorization" not in text
    assert PRIVATE not in text


@pytest.mark.parametrize("log_request_data", [True])
async def test_request_data_is_logged_when_configured(
    client: httpx.AsyncClient, tenant: Tenant, lines: Lines
) -> None:
    await execute(client, tenant, production("main"))
    [line] = lines()
    assert line["actor"] == f"release-{PRIVATE}"
    assert line["context"] == {"branch": "main", "note": PRIVATE}
    assert line["payload"] == {"ticket": PRIVATE}
    assert tenant.api_key not in msgspec.json.encode(line).decode()


async def test_a_disabled_decision_logger_writes_nothing(
    client: httpx.AsyncClient, tenant: Tenant, lines: Lines
) -> None:
    logging.getLogger(DECISION_LOGGER).setLevel(logging.CRITICAL)  # EXECAUTH_DECISION_LOG=off
    await execute(client, tenant, production("main"))
    assert len(lines()) == 0


def test_an_unexpected_exception_is_a_500_refusal_naming_its_type_at_the_clock_time() -> None:
    log = DecisionLog(clock=lambda: 86_400.25, trace_ids=lambda: None)
    line = log.fields({}, None, KeyError("boom"), 0.002)
    assert (line["time"], line["status"], line["error"], line["exception"]) == (
        "1970-01-02T00:00:00.250Z",
        500,
        "internal_error",
        "KeyError",
    )
    assert line["latency_ms"] == 2.0


def test_trace_and_span_ids_are_logged_when_a_trace_is_current() -> None:
    log = DecisionLog(trace_ids=lambda: ("a" * 32, "b" * 16))
    line = log.fields({}, None, KeyError("boom"), 0.0)
    assert (line["trace_id"], line["span_id"]) == ("a" * 32, "b" * 16)


def test_a_line_that_cannot_be_built_never_raises_into_the_request(
    lines: Lines, caplog: pytest.LogCaptureFixture
) -> None:
    log = DecisionLog(trace_ids=lambda: None)
    log.record({}, ExecuteAnswer(200, b"not a receipt", [], repeated=False), None, 0.0)
    assert len(lines()) == 0
    assert "writing the decision log failed" in caplog.text
