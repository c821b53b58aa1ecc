"""``POST /v1/execute`` as a plain ASGI app: the decision path without a framework object
per request (docs/decisions.md, "The execute route speaks ASGI").

Every other route is a Starlette endpoint. This one is answered a few thousand times a
second, and per request Starlette built a ``Request``, its ``Headers``, a ``State``, a
``Response`` with its header list and a wrapper that catches exceptions, around a
handler that reads five headers and sends one JSON body. Here the five headers are read
from the ASGI scope in one pass, the body from ``receive``, and the answer is two
``send`` calls.

It stays inside the app's middleware and error handling: it is mounted as a Starlette
``Route`` whose endpoint is an ASGI app, so the tracing middleware, the issuer check and
the one mapping of errors to the wire (``api/errors.py``) apply unchanged. What the
error handlers need from this request (its id, its org's wire profile, the rate-limit
headers once counted) is written to the scope's ``state``, which is what a Starlette
``Request.state`` reads, and the body checks are those of every other JSON route
(``api/wire.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from starlette.types import Receive, Scope, Send

from execauth.api.wire import (
    answer_profile,
    check_json_head,
    decode_json_body,
    new_request_id,
    profile_preference,
    receive_body,
)
from execauth.errors import ExecauthError, QuotaExceeded, RateLimited
from execauth.observability import tracing
from execauth.observability.decision_log import DecisionLog
from execauth.observability.metrics import Metrics
from execauth.request import parse_execute_request
from execauth.usecases.execute import ExecutionService

# ESCALATE: 202 Accepted, the request is held for approval (docs/approvals.md).
PROFILE_B_STATUS = {"PERMIT": 200, "DENY": 403, "SILENCE": 422, "ESCALATE": 202}
# The request headers the route reads; a repeated one counts by its first value, as
# Starlette's ``Headers.get`` (and so every other route) reads it.
_READ = frozenset(
    (b"authorization", b"idempotency-key", b"content-type", b"content-length", b"prefer")
)
_JSON_HEADERS = [(b"content-type", b"application/json")]


@dataclass(frozen=True, slots=True)
class ExecuteAnswer:
    """A decision's HTTP answer: its status, the receipt's bytes, the extra headers."""

    status: int
    body: bytes
    headers: list[tuple[bytes, bytes]]
    repeated: bool  # an idempotent repeat of an earlier decision


class ExecuteEndpoint:
    """The ASGI app of ``POST /v1/execute`` (and its alias ``/execute``)."""

    def __init__(
        self,
        service: ExecutionService,
        metrics: Metrics,
        decision_log: DecisionLog,
        max_body_bytes: int,
    ) -> None:
        self._service = service
        self._metrics = metrics
        self._decision_log = decision_log
        self._max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        # The dict behind ``Request.state``: the error handlers read this request's id,
        # profile and rate-limit headers from it (api/errors.py).
        state: dict[str, Any] = scope.setdefault("state", {})
        status = 500
        answer: ExecuteAnswer | None = None
        error: Exception | None = None
        try:
            answer = await self._answer(scope, receive, state)
            status = answer.status
        except ExecauthError as exc:
            status = exc.status
            error = exc
            raise  # answered by api/errors.py
        except Exception as exc:
            error = exc  # answered by api/errors.py; the decision log names its type
            raise
        finally:
            elapsed = time.perf_counter() - started
            self._metrics.count_execute_response(status)
            self._metrics.execute_seconds.observe(elapsed)
            self._decision_log.record(state, answer, error, elapsed)  # one line per request
        body = answer.body
        headers = [
            *answer.headers,
            (b"content-length", str(len(body)).encode()),
            *_JSON_HEADERS,
        ]
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _answer(self, scope: Scope, receive: Receive, state: dict[str, Any]) -> ExecuteAnswer:
        service = self._service
        rid = state["request_id"] = new_request_id()
        fields = _read_headers(scope)
        with tracing.step("authenticate"):
            principal = await service.authenticate(fields.get(b"authorization"))
        state["principal"] = principal  # for the decision log (org and key ids)
        org_id = principal.org.org_id
        tracing.annotate(org_id=org_id)
        state["org_profile"] = principal.org.wire_profile
        with tracing.step("rate_limit"):
            try:
                limit = await service.admit(principal)
            except RateLimited:
                self._metrics.count_rate_limited(org_id)
                raise
        rate_limit_headers = limit.headers()
        state["rate_limit_headers"] = rate_limit_headers  # errors from here on carry them
        check_json_head(
            fields.get(b"content-type"), fields.get(b"content-length"), self._max_body_bytes
        )
        body = decode_json_body(await receive_body(receive, self._max_body_bytes))
        execute_request = parse_execute_request(body, fields.get(b"idempotency-key"))
        state["execute_request"] = execute_request  # its data logged only if configured
        tracing.annotate(surface=execute_request.surface)
        try:
            result = await service.execute(principal, execute_request)
        except QuotaExceeded:
            self._metrics.count_quota_exceeded(org_id)
            raise
        tracing.annotate(decision=result.decision, repeated=result.repeated)
        preferred = profile_preference(fields.get(b"prefer"))
        profile = answer_profile(preferred, principal.org.wire_profile)
        status = PROFILE_B_STATUS[result.decision] if profile == "b" else 200
        headers = [(b"preference-applied", b"wire=" + preferred.encode())] if preferred else []
        headers += [
            (name.lower().encode(), value.encode()) for name, value in rate_limit_headers.items()
        ]
        headers.append((b"x-request-id", rid.encode()))
        if result.repeated:
            headers.append((b"idempotent-replayed", b"true"))
        else:
            self._metrics.count_decision(org_id, execute_request.surface, result.decision)
        return ExecuteAnswer(status, result.receipt, headers, result.repeated)


def _read_headers(scope: Scope) -> dict[bytes, str]:
    """The headers this route reads, decoded as Starlette decodes them (latin-1)."""
    found: dict[bytes, str] = {}
    for name, value in scope["headers"]:
        if name in _READ and name not in found:
            found[name] = value.decode("latin-1")
    return found
