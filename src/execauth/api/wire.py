"""Wire-level helpers: JSON responses, the A/B profiles, bounded body reading."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from execauth.errors import InvalidRequest, PayloadTooLarge
from execauth.random_pool import random_hex

_decoder = msgspec.json.Decoder()
# Deeper documents are refused up front: canonicalization, CEL and msgspec all
# recurse, and a stack overflow must be a 400, never a 500.
MAX_JSON_DEPTH = 64
T = TypeVar("T")


def json_response(
    content: Any, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    body = content if isinstance(content, bytes) else msgspec.json.encode(content)
    return Response(body, status_code, headers, media_type="application/json")


def request_id(request: Request) -> str:
    """A server-side id for this HTTP request (echoed in errors and logs)."""
    rid = getattr(request.state, "request_id", None)
    if rid is None:
        rid = "req_" + random_hex(8)
        request.state.request_id = rid
    return rid


def preferred_profile(request: Request) -> str | None:
    """``Prefer: wire=a|b`` (RFC 7240), or ``None`` when the client expressed none."""
    header = request.headers.get("prefer")
    if not header:
        return None
    for preference in header.split(","):
        name, _, value = preference.strip().partition("=")
        if name.strip().lower() == "wire" and value.strip().strip('"').lower() in ("a", "b"):
            return value.strip().strip('"').lower()
    return None


def wire_profile(request: Request) -> str:
    """The profile for this answer: the client's preference, else the org's, else A."""
    preferred = preferred_profile(request)
    if preferred is not None:
        return preferred
    return getattr(request.state, "org_profile", None) or "a"


def profile_headers(request: Request) -> dict[str, str]:
    preferred = preferred_profile(request)
    return {"Preference-Applied": f"wire={preferred}"} if preferred else {}


async def read_json_body(request: Request, limit: int) -> Any:
    """Decode the body as JSON, refusing more than ``limit`` bytes without reading them all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body exceeds {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    if not body:
        raise InvalidRequest("request body is empty; expected a JSON object")
    try:
        value = _decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidRequest(f"request body nests deeper than {MAX_JSON_DEPTH} levels") from exc
    if _depth_exceeds(value, MAX_JSON_DEPTH):
        raise InvalidRequest(f"request body nests deeper than {MAX_JSON_DEPTH} levels")
    return value


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Iteratively, so that the check itself cannot overflow the stack."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def decode_as(body: Any, kind: type[T]) -> T:
    """Convert a decoded JSON body to a strict struct; 400 names the offending field."""
    try:
        return msgspec.convert(body, kind)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(str(exc)) from exc
