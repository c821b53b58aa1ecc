"""The gateway surface: execute, the key lists, the protocol checks, health."""

from __future__ import annotations

import functools
import time
from importlib.resources import files

import anyio.to_thread
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from execauth.api.approval_routes import approval_routes
from execauth.api.consume_routes import consume_routes
from execauth.api.wire import (
    json_response,
    profile_headers,
    read_json_body,
    request_id,
    wire_profile,
)
from execauth.errors import (
    ExecauthError,
    InvalidRequest,
    QuotaExceeded,
    RateLimited,
    ServiceUnavailable,
)
from execauth.keyring import KEY_LIST_CACHE_TTL, jwks_document, key_list_document
from execauth.observability import tracing
from execauth.observability.decision_log import DecisionLog
from execauth.receipt_shape import check_receipt_shape
from execauth.request import parse_execute_request
from execauth.serving.runtime import Runtime
from execauth.usecases.approve import Approvals
from execauth.usecases.consume import ReceiptConsumption
from execauth.usecases.execute import ExecutionService
from execauth.verify import parse_key_list, verify_receipt

# ESCALATE: 202 Accepted, the request is held for approval (docs/approvals.md).
PROFILE_B_STATUS = {"PERMIT": 200, "DENY": 403, "SILENCE": 422, "ESCALATE": 202}
PUBLIC_CACHE = {
    "Cache-Control": f"public, max-age={KEY_LIST_CACHE_TTL}",
    "Access-Control-Allow-Origin": "*",
}
OPENAPI = files("execauth.api").joinpath("openapi.yaml")


def gateway_routes(
    runtime: Runtime,
    service: ExecutionService,
    *,
    approvals: Approvals,
    consumption: ReceiptConsumption,
) -> list[BaseRoute]:
    """``runtime`` for the key lists, health and metrics; the use cases for the rest."""
    settings = runtime.settings
    metrics = runtime.metrics
    decision_log = DecisionLog(include_request_data=settings.decision_log_context)

    async def execute(request: Request) -> Response:
        started = time.perf_counter()
        status = 500
        response: Response | None = None
        error: Exception | None = None
        try:
            response = await _execute(request)
            status = response.status_code
            return response
        except ExecauthError as exc:
            status = exc.status
            error = exc
            raise
        except Exception as exc:
            error = exc  # answered by api/errors.py; the decision log names its type
            raise
        finally:
            elapsed = time.perf_counter() - started
            metrics.execute_responses.labels(str(status)).inc()
            metrics.execute_seconds.observe(elapsed)
            decision_log.record(request, response, error, elapsed)  # one line per request

    async def _execute(request: Request) -> Response:
        request_id(request)
        with tracing.step("authenticate"):
            principal = await service.authenticate(request.headers.get("authorization"))
        request.state.principal = principal  # for the decision log (org and key ids)
        tracing.annotate(org_id=principal.org.org_id)
        request.state.org_profile = principal.org.wire_profile
        with tracing.step("rate_limit"):
            try:
                rate_limit_headers = (await service.admit(principal)).headers()
            except RateLimited:
                metrics.count_rate_limited(principal.org.org_id)
                raise
        request.state.rate_limit_headers = rate_limit_headers  # errors from here on carry them
        body = await read_json_body(request, settings.max_body_bytes)
        execute_request = parse_execute_request(body, request.headers.get("idempotency-key"))
        request.state.execute_request = execute_request  # its data logged only if configured
        tracing.annotate(surface=execute_request.surface)
        try:
            result = await service.execute(principal, execute_request)
        except QuotaExceeded:
            metrics.count_quota_exceeded(principal.org.org_id)
            raise
        tracing.annotate(decision=result.decision, repeated=result.repeated)
        status = PROFILE_B_STATUS[result.decision] if wire_profile(request) == "b" else 200
        headers = {
            **profile_headers(request),
            **rate_limit_headers,
            "X-Request-Id": request_id(request),
        }
        if result.repeated:
            headers["Idempotent-Replayed"] = "true"
        else:
            metrics.count_decision(principal.org.org_id, execute_request.surface, result.decision)
        return json_response(result.receipt, status, headers)

    async def service_keys(request: Request) -> Response:
        document = key_list_document(runtime.keyring.records, settings.issuer)
        return json_response(document, headers=PUBLIC_CACHE)

    async def jwks(request: Request) -> Response:
        return json_response(jwks_document(runtime.keyring.records), headers=PUBLIC_CACHE)

    async def verify_receipt_shape(request: Request) -> Response:
        strict = _strict_parameter(request)
        body = await read_json_body(request, settings.max_body_bytes)
        receipt = body.get("receipt", body) if isinstance(body, dict) else body
        return json_response(check_receipt_shape(receipt, strict=strict).as_json())

    async def verify_signature(request: Request) -> Response:
        body = await read_json_body(request, settings.max_body_bytes)
        receipt = body.get("receipt", body) if isinstance(body, dict) else body
        now = service.clock()
        keys, issuer = parse_key_list(key_list_document(runtime.keyring.records, settings.issuer))
        verdict = verify_receipt(receipt, keys, now=now, issuer=issuer)
        return json_response(
            {
                "valid": verdict.authentic,
                "key_id": verdict.key_id,
                "reason": verdict.reason,
                "detail": verdict.detail,
                "decision": verdict.decision,
                "expired": verdict.expired,
            }
        )

    async def openapi(request: Request) -> Response:
        return PlainTextResponse(OPENAPI.read_text(encoding="utf-8"), media_type="application/yaml")

    async def metrics_endpoint(request: Request) -> Response:
        # Off the event loop: the stream and store figures are read from the database at
        # scrape time. Whether the writer answers is asked here, on the loop it serves.
        writer_up = await runtime.writer.ready()
        exposition = await anyio.to_thread.run_sync(
            functools.partial(metrics.exposition, writer_up=writer_up)
        )
        return Response(exposition, media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        return json_response({"status": "ok"})

    async def readyz(request: Request) -> Response:
        """Ready when the writer runs, the database answers, a key can sign and limits work."""
        if not await runtime.writer.ready():
            raise ServiceUnavailable("the receipt writer is not running")
        try:
            await anyio.to_thread.run_sync(runtime.control.get_setting, "schema_probe")
        except Exception as exc:
            raise ServiceUnavailable("the database is not reachable") from exc
        runtime.keyring.signer(service.clock())
        if not await service.rate_limiter.healthy():
            raise ServiceUnavailable("the rate limiter's storage is not reachable")
        return json_response({"status": "ready"})

    return [
        Route("/v1/execute", execute, methods=["POST"]),
        Route("/execute", execute, methods=["POST"]),
        Route("/.well-known/service-keys.json", service_keys, methods=["GET"]),
        Route("/.well-known/jwks.json", jwks, methods=["GET"]),
        Route("/protocol/verify-receipt", verify_receipt_shape, methods=["POST"]),
        Route("/protocol/verify-signature", verify_signature, methods=["POST"]),
        Route("/openapi.yaml", openapi, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        *approval_routes(service, approvals, "gateway", settings.max_body_bytes),
        *consume_routes(service, consumption, settings.max_body_bytes),
    ]


def _strict_parameter(request: Request) -> bool:
    """``?strict=true`` asks the shape check for a full receipt; a typo is 400, not ignored."""
    value = request.query_params.get("strict", "false")
    if value not in ("true", "false"):
        raise InvalidRequest(f"strict must be true or false, not {value!r}")
    return value == "true"
