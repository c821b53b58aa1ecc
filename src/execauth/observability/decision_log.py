"""The decision log: one JSON line per ``POST /v1/execute``, on the ``execauth.decisions`` logger.

Written from one place, the execute route (``api/execute_endpoint.py``), after the
answer is known. A decision (PERMIT, DENY, SILENCE, ESCALATE, or an idempotent repeat
of one) is described from the receipt being returned, the signed source of truth, so
the line cannot say something the receipt does not; a refusal that never reached a
decision (401, 429, 400, 503…) gets a shorter line with its status and error code.
The fields are in docs/observability.md ("Logs").

Never in a line: the API key's secret, the Authorization header, or, unless
``EXECAUTH_DECISION_LOG_CONTEXT=true``, the request's own data (actor, context,
payload), which may hold personal data the operator has not chosen to log
(docs/decisions.md).

Cost: nothing is built unless the logger is enabled (``EXECAUTH_DECISION_LOG=off``
leaves one level check per request); when it is, the receipt is decoded into the few
fields below by msgspec.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeGuard

import msgspec

from execauth.errors import ExecauthError
from execauth.observability.logs import (
    DECISION_LOGGER,
    DecisionLineHandler,
    format_time,
    process_name,
)
from execauth.observability.tracing import current_trace_ids

log = logging.getLogger("execauth.decision_log")
TraceIds = Callable[[], tuple[str, str] | None]


class _Receipt(msgspec.Struct, rename={"reason": "reasonCode", "idempotency_key": "request_id"}):
    """The fields of a receipt the log repeats; the rest of it is not decoded."""

    receipt_id: str
    execution_id: str
    decision: str
    surface: str | None = None
    action: str | None = None
    actor: str | None = None
    org_id: str | None = None
    policy_id: str | None = None
    policy_version: int | None = None
    rule_id: str | None = None
    reason_code: str | None = None
    reason: str | None = None
    approval_id: str | None = None
    idempotency_key: str | None = None
    key_id: str | None = None


_receipt_decoder = msgspec.json.Decoder(_Receipt)


class Answered(Protocol):
    """What the log reads of a decision's answer (``api/execute_endpoint.ExecuteAnswer``)."""

    @property
    def status(self) -> int: ...
    @property
    def body(self) -> bytes: ...  # the receipt
    @property
    def repeated(self) -> bool: ...


class DecisionLog:
    """Writes the decision log's line for each execute request."""

    def __init__(
        self,
        *,
        include_request_data: bool = False,
        clock: Callable[[], float] = time.time,
        trace_ids: TraceIds = current_trace_ids,
    ) -> None:
        self._logger = logging.getLogger(DECISION_LOGGER)
        self._include_request_data = include_request_data
        self._clock = clock
        self._trace_ids = trace_ids  # None outside a traced request, and always with tracing off

    def record(
        self,
        state: Mapping[str, Any],
        answer: Answered | None,
        error: BaseException | None,
        seconds: float,
    ) -> None:
        """The line for one request; never raises (a log must not change an answer).

        ``state`` is what the route learnt of the request before it answered or failed
        (``request_id``, ``principal``, ``execute_request``); ``answer`` is None when it
        failed with ``error``.
        """
        logger = self._logger
        if not logger.isEnabledFor(logging.INFO):
            return
        try:
            fields = self.fields(state, answer, error, seconds)
            handlers = logger.handlers
            if len(handlers) == 1 and not logger.propagate and _takes_fields(handlers[0]):
                # The configured JSON destination (logs.logging_config): the line is
                # written without a LogRecord, which its handler would only unpack.
                handlers[0].write_fields(fields)
                return
            # makeRecord + handle is logger.info without its search of the call stack
            # for a caller's file and line, which no decision line shows.
            logger.handle(logger.makeRecord(logger.name, logging.INFO, "", 0, fields, (), None))
        except Exception:
            log.exception("writing the decision log failed")

    def fields(
        self,
        state: Mapping[str, Any],
        answer: Answered | None,
        error: BaseException | None,
        seconds: float,
    ) -> dict[str, Any]:
        # logger and process as in every process log line: one filter finds decisions.
        fields: dict[str, Any] = {
            "time": format_time(self._clock()),
            "logger": DECISION_LOGGER,
            "process": process_name(),
        }
        if answer is not None and error is None:
            fields["event"] = "decision"
            fields["status"] = answer.status
        else:
            fields["event"] = "refusal"
            fields["status"] = error.status if isinstance(error, ExecauthError) else 500
            fields["error"] = error.code if isinstance(error, ExecauthError) else "internal_error"
            if error is not None and not isinstance(error, ExecauthError):
                fields["exception"] = type(error).__name__
        fields["request_id"] = state.get("request_id")
        fields["latency_ms"] = round(seconds * 1000, 3)
        principal = state.get("principal")
        if principal is not None:
            fields["org_id"] = principal.org.org_id
            fields["key_id"] = principal.api_key.key_id
        if answer is not None and error is None:
            self._add_receipt(fields, answer.body)
            fields["repeated"] = answer.repeated
        trace = self._trace_ids()
        if trace is not None:
            fields["trace_id"], fields["span_id"] = trace
        if self._include_request_data:
            execute_request = state.get("execute_request")
            if execute_request is not None:
                fields["actor"] = execute_request.actor
                fields["context"] = execute_request.context
                fields["payload"] = execute_request.payload
        return fields

    def _add_receipt(self, fields: dict[str, Any], body: bytes) -> None:
        receipt = _receipt_decoder.decode(body)
        fields["org_id"] = receipt.org_id or fields.get("org_id")
        fields["surface"] = receipt.surface
        if receipt.action is not None:
            fields["action"] = receipt.action
        fields["decision"] = receipt.decision
        fields["policy_id"] = receipt.policy_id
        fields["policy_version"] = receipt.policy_version
        fields["rule_id"] = receipt.rule_id
        if receipt.reason_code is not None:
            fields["reason_code"] = receipt.reason_code
            fields["reason"] = receipt.reason
        fields["receipt_id"] = receipt.receipt_id
        fields["execution_id"] = receipt.execution_id
        if receipt.approval_id is not None:
            fields["approval_id"] = receipt.approval_id
        if receipt.idempotency_key is not None:
            fields["idempotency_key"] = receipt.idempotency_key
        fields["signing_key_id"] = receipt.key_id


def _takes_fields(handler: logging.Handler) -> TypeGuard[DecisionLineHandler]:
    """Whether ``handler`` would write a decision line as it is (no level or filter)."""
    unfiltered = not handler.filters and handler.level <= logging.INFO
    return type(handler) is DecisionLineHandler and unfiltered
