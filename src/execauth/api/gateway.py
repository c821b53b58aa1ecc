"""The gateway surface: execute, the key lists, the protocol checks, health."""

from __future__ import annotations

import functools
from importlib.resources import files

import anyio.to_thread
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from execauth.api.approval_routes import approval_routes
from execauth.api.consume_routes import consume_routes
from execauth.api.execute_endpoint import ExecuteEndpoint
from execauth.api.wire import json_response, read_json_body
from execauth.errors import InvalidRequest, ServiceUnavailable
from execauth.keyring import KEY_LIST_CACHE_TTL, jwks_document, key_list_document
from execauth.observability.decision_log import DecisionLog
from execauth.receipt_shape import check_receipt_shape
from execauth.serving.runtime import Runtime
from execauth.usecases.approve import Approvals
from execauth.usecases.consume import ReceiptConsumption
from execauth.usecases.execute import ExecutionService
from execauth.verify import parse_key_list, verify_receipt

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
    execute = ExecuteEndpoint(
        service,
        metrics,
        DecisionLog(include_request_data=settings.decision_log_context),
        settings.max_body_bytes,
    )

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
