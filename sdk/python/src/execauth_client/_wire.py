"""The HTTP contract, free of I/O: request bodies, response mapping, retry timing.

Shared by ``Client`` and ``AsyncClient`` so that both behave identically.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import rfc8785

from execauth_client.errors import (
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
from execauth_client.receipt import Receipt

EXECUTE_PATH = "/v1/execute"
APPROVALS_PATH = "/v1/approvals/"
MAX_APPROVAL_WAIT = 60  # seconds the server holds one long-poll at most


def approval_outcome(response: httpx.Response) -> tuple[str, Receipt | None]:
    """The state of an approval and its outcome receipt once it has one."""
    if response.status_code != 200:
        raise error_for(response)
    body = _json(response)
    if not isinstance(body, Mapping) or not isinstance(body.get("state"), str):
        raise UnexpectedResponse("the answer is not an approval", status=response.status_code)
    outcome = body.get("outcome_receipt")
    return str(body["state"]), Receipt.from_dict(outcome) if outcome is not None else None


KEYS_PATH = "/.well-known/service-keys.json"
PLAN_LIMIT_CODE = "SERVICE_PLAN_LIMIT_EXCEEDED"
# 500 too: the service documents internal_error as retryable (docs/api.md, "Errors"); the
# idempotency key makes a repeat safe (the same key returns the same receipt).
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})

_BY_CODE: dict[str, type[ExecauthError]] = {
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "invalid_request": InvalidRequest,
    "payload_too_large": InvalidRequest,
    "idempotency_conflict": InvalidRequest,
    "method_not_allowed": InvalidRequest,
    "surface_not_found": SurfaceNotFound,
    "rate_limited": RateLimited,
    PLAN_LIMIT_CODE: QuotaExceeded,
    "service_unavailable": ServiceUnavailable,
    "internal_error": ServiceUnavailable,
}
_BY_STATUS: dict[int, type[ExecauthError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: SurfaceNotFound,
    409: InvalidRequest,
    413: InvalidRequest,
    422: InvalidRequest,
    429: RateLimited,
}


def execute_body(
    surface: str,
    *,
    actor: str | None,
    action: str | None,
    context: Mapping[str, Any] | None,
    payload: Mapping[str, Any] | None,
    idempotency_key: str,
) -> dict[str, Any]:
    body: dict[str, Any] = {"surface": surface, "idempotency_key": idempotency_key}
    for name, value in (("actor", actor), ("action", action)):
        if value is not None:
            body[name] = value
    if context is not None:
        body["context"] = dict(context)
    if payload is not None:
        body["payload"] = dict(payload)
    return body


def request_digest(
    surface: str,
    *,
    actor: str | None,
    action: str | None,
    context: Mapping[str, Any] | None,
    payload: Mapping[str, Any] | None,
) -> str:
    """``request_digest`` as the service computes it (docs/receipts.md) for what we sent."""
    normalized = {
        "surface": surface,
        "action": action,
        "actor": actor,
        "context": dict(context or {}),
        "payload": dict(payload or {}),
    }
    return "sha256:" + hashlib.sha256(rfc8785.dumps(normalized)).hexdigest()


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def retry_after(response: httpx.Response, now: datetime | None = None) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), or ``None``."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def error_for(response: httpx.Response) -> ExecauthError:
    """The typed error for a non-receipt answer; profile A (flat) and B (nested) bodies."""
    body = _json(response)
    code = message = request_id = None
    if isinstance(body, Mapping):
        error = body.get("error")
        if isinstance(error, Mapping):  # profile B: {"error": {"code", "message", "request_id"}}
            code, message, request_id = (
                error.get("code"),
                error.get("message"),
                error.get("request_id"),
            )
        else:  # profile A: {"error": code, "message": text, "request_id": id}
            code, message, request_id = error, body.get("message"), body.get("request_id")
    code = code if isinstance(code, str) else None
    status = response.status_code
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status)
    if cls is None:
        cls = ServiceUnavailable if status >= 500 else ExecauthError
    text = message if isinstance(message, str) else f"HTTP {status}"
    return cls(
        f"{code or status}: {text}",
        status=status,
        code=code,
        request_id=request_id if isinstance(request_id, str) else None,
        retry_after=retry_after(response),
    )


def is_decision_body(response: httpx.Response) -> bool:
    """Profile B answers DENY with 403, SILENCE with 422 and ESCALATE with 202, the receipt
    as body."""
    body = _json(response)
    return (
        response.status_code in (200, 202, 403, 422)
        and isinstance(body, Mapping)
        and isinstance(body.get("decision"), str)
        and "receipt_id" in body
        and "error" not in body
    )


def receipt_or_error(response: httpx.Response) -> Receipt:
    if is_decision_body(response):
        return Receipt.from_dict(response.json())
    if response.status_code == 200:
        raise UnexpectedResponse("HTTP 200 without a receipt body", status=200)
    raise error_for(response)


def should_retry(response: httpx.Response) -> bool:
    if response.status_code not in RETRYABLE_STATUS:
        return False
    # An exhausted monthly quota does not come back in seconds.
    return not isinstance(error_for(response), QuotaExceeded)


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter; a server's ``Retry-After`` wins."""

    base: float = 0.5
    cap: float = 30.0
    max_retry_after: float = 120.0
    jitter: Callable[[], float] = random.random

    def delay(self, attempt: int, retry_after: float | None) -> float | None:
        """Seconds to wait before retry number ``attempt`` (0-based), or ``None`` to give up
        (the server asked us to wait longer than ``max_retry_after``)."""
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after else None
        return self.jitter() * min(self.cap, self.base * 2.0**attempt)
