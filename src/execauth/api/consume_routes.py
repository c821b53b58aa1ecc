"""``POST /v1/receipts/{receipt_id}/consume``: use a PERMIT once (docs/receipts.md).

On the gateway surface, for an execute or admin key of the receipt's organization,
counted against the org's rate limit like an execute. The body is optional:
``{"actor": "...", "note": "..."}`` say who used the receipt and why.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from execauth.api.wire import json_response, profile_headers, read_json_body, request_id
from execauth.errors import InvalidRequest, NotFound
from execauth.usecases.consume import ConsumeRequest, ReceiptConsumption
from execauth.usecases.execute import ExecutionService

MAX_ACTOR_CHARS = 256
MAX_NOTE_CHARS = 1000
# The receipt ids this service issues are "service_rcpt_" and 16 hex characters (29 in
# all); a longer path segment names no receipt and is answered without a lookup. 64 is
# the column's width.
MAX_RECEIPT_ID_CHARS = 64


def consume_routes(
    service: ExecutionService, consumption: ReceiptConsumption, max_body: int
) -> list[BaseRoute]:

    async def consume_receipt(request: Request) -> Response:
        request_id(request)
        principal = await service.authenticate(request.headers.get("authorization"))
        request.state.org_profile = principal.org.wire_profile
        rate_limit_headers = (await service.admit(principal)).headers()
        request.state.rate_limit_headers = rate_limit_headers  # errors from here on carry them
        receipt_id = request.path_params["receipt_id"]
        if len(receipt_id) > MAX_RECEIPT_ID_CHARS:
            raise NotFound("no such receipt in this organization")
        actor, note = _fields(await _optional_body(request, max_body))
        asked = ConsumeRequest(principal.api_key, receipt_id, actor, note)
        used = await consumption.consume(asked)
        headers = {
            **profile_headers(request),
            **rate_limit_headers,
            "X-Request-Id": request_id(request),
        }
        return json_response(used.as_json(), 200, headers)

    return [Route("/v1/receipts/{receipt_id}/consume", consume_receipt, methods=["POST"])]


async def _optional_body(request: Request, limit: int) -> Any:
    """No body at all is ``{}``; any body goes through the one JSON door."""
    # HTTP/1.1: no Content-Length and no Transfer-Encoding, or a length of 0, is no body.
    chunked = "transfer-encoding" in request.headers
    if not chunked and request.headers.get("content-length") in (None, "0"):
        return {}
    return await read_json_body(request, limit)


def _fields(body: object) -> tuple[str | None, str | None]:
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object with 'actor' and/or 'note'")
    unknown = set(body) - {"actor", "note"}
    if unknown:
        raise InvalidRequest(f"unknown field(s) {', '.join(sorted(unknown))}")
    actor, note = body.get("actor"), body.get("note")
    if actor is not None and (not isinstance(actor, str) or not 0 < len(actor) <= MAX_ACTOR_CHARS):
        raise InvalidRequest(f"actor must be a string of 1-{MAX_ACTOR_CHARS} characters")
    if note is not None and (not isinstance(note, str) or len(note) > MAX_NOTE_CHARS):
        raise InvalidRequest(f"note must be a string of at most {MAX_NOTE_CHARS} characters")
    return actor, note
