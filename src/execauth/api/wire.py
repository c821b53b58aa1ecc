"""Wire-level helpers: JSON responses, the A/B profiles, bounded body reading.

``read_json_body`` is the one door of every JSON request body: Content-Type, size,
UTF-8, JSON syntax, nesting depth, duplicate object keys and characters the stores
cannot hold are all refused there with a 4xx (docs/decisions.md, "Bad input").
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive

from execauth.errors import (
    ClientDisconnected,
    InvalidRequest,
    PayloadTooLarge,
    UnsupportedMediaType,
)
from execauth.random_pool import random_hex

_decoder = msgspec.json.Decoder()
# Deeper documents are refused up front: canonicalization, CEL and msgspec all
# recurse, and a stack overflow must be a 400, never a 500.
MAX_JSON_DEPTH = 64
T = TypeVar("T")
# An escaped colon or NUL makes the byte-level shortcuts below inconclusive (an escape
# hides the character from ``bytes.count``); only then is the body looked at closely.
_ESCAPED_COLONS = (b"\\u003a", b"\\u003A")
_ESCAPED_NUL = b"\\u0000"


def json_response(
    content: Any, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    body = content if isinstance(content, bytes) else msgspec.json.encode(content)
    return Response(body, status_code, headers, media_type="application/json")


def new_request_id() -> str:
    return "req_" + random_hex(8)


def request_id(request: Request) -> str:
    """A server-side id for this HTTP request (echoed in errors and logs)."""
    rid = getattr(request.state, "request_id", None)
    if rid is None:
        rid = new_request_id()
        request.state.request_id = rid
    return rid


def preferred_profile(request: Request) -> str | None:
    """``Prefer: wire=a|b`` (RFC 7240), or ``None`` when the client expressed none."""
    return profile_preference(request.headers.get("prefer"))


def profile_preference(header: str | None) -> str | None:
    """The wire profile a ``Prefer`` header's value asks for, if any."""
    if not header:
        return None
    for preference in header.split(","):
        name, _, value = preference.strip().partition("=")
        if name.strip().lower() == "wire" and value.strip().strip('"').lower() in ("a", "b"):
            return value.strip().strip('"').lower()
    return None


def wire_profile(request: Request) -> str:
    return answer_profile(preferred_profile(request), getattr(request.state, "org_profile", None))


def answer_profile(preferred: str | None, org_profile: str | None) -> str:
    """The profile for this answer: the client's preference, else the org's, else A."""
    return preferred or org_profile or "a"


def profile_headers(request: Request) -> dict[str, str]:
    preferred = preferred_profile(request)
    return {"Preference-Applied": f"wire={preferred}"} if preferred else {}


def is_json_media_type(content_type: str | None) -> bool:
    """``application/json`` or a structured ``+json`` type (RFC 6839), parameters ignored."""
    if not content_type:
        return False
    media_type = content_type.partition(";")[0].strip().lower()
    kind, _, subtype = media_type.partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


async def read_json_body(request: Request, limit: int) -> Any:
    """Decode the body as JSON, refusing more than ``limit`` bytes without reading them all.

    Refused, each with a 4xx naming the reason: a Content-Type other than JSON (415,
    so that a form or text body can never be read as a request); more than ``limit``
    bytes (413); an empty body, invalid UTF-8, malformed JSON, nesting deeper than
    ``MAX_JSON_DEPTH``, an object with the same key twice (RFC 8785 builds on I-JSON,
    RFC 7493, which forbids them: a reader keeping the first value would see another
    request than ours, which keeps the last), or a string holding U+0000, which
    PostgreSQL's text cannot store (400). A client gone mid-body is
    ``ClientDisconnected``: there is nobody to answer.
    """
    headers = request.headers
    check_json_head(headers.get("content-type"), headers.get("content-length"), limit)
    return decode_json_body(await receive_body(request.receive, limit))


def check_json_head(content_type: str | None, content_length: str | None, limit: int) -> None:
    """The refusals ``read_json_body`` makes from the request's head, before any body byte."""
    if not is_json_media_type(content_type):
        raise UnsupportedMediaType(
            "the request body must be JSON: send Content-Type: application/json"
        )
    # ASCII digits only, and few enough for int(): the header is the client's text.
    if (
        content_length
        and content_length.isascii()
        and content_length.isdigit()
        and (len(content_length) > 20 or int(content_length) > limit)
    ):
        raise PayloadTooLarge(f"request body exceeds {limit} bytes")


async def receive_body(receive: Receive, limit: int) -> bytes:
    """The body's bytes from the ASGI ``receive`` channel, refused past ``limit`` (413)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect
            raise ClientDisconnected("the client disconnected before sending its whole body")
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def decode_json_body(body: bytes) -> Any:
    """The refusals ``read_json_body`` makes from the body's bytes, and the decoded value."""
    if not body:
        raise InvalidRequest("request body is empty; expected a JSON object")
    try:
        value = _decoder.decode(body)
    except UnicodeDecodeError as exc:
        raise InvalidRequest(
            f"request body is not valid UTF-8: {exc.reason} at byte {exc.start}"
        ) from exc
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidRequest(f"request body nests deeper than {MAX_JSON_DEPTH} levels") from exc
    # Each level of nesting opens with a bracket byte, so a body with fewer of them (in
    # strings too) cannot be too deep: most bodies skip the walk (6 µs for a request).
    brackets = body.count(b"{") + body.count(b"[")
    if brackets > MAX_JSON_DEPTH and _depth_exceeds(value, MAX_JSON_DEPTH):
        raise InvalidRequest(f"request body nests deeper than {MAX_JSON_DEPTH} levels")
    if _has_duplicate_keys(body, value):
        raise InvalidRequest(
            "request body has an object with the same key twice (I-JSON, RFC 7493, forbids it)"
        )
    if _ESCAPED_NUL in body and _holds_nul(value):
        raise InvalidRequest(
            "request body holds the character U+0000 (NUL) in a string; it cannot be stored"
        )
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


def _has_duplicate_keys(body: bytes, value: Any) -> bool:
    """Whether some object of ``body`` (valid JSON, decoded to ``value``) names a key twice.

    msgspec keeps the last of duplicate keys silently, so members are counted instead,
    in C: outside strings a valid JSON text has exactly one ``:`` per object member, and
    msgspec writes a colon inside a string as itself. So re-encoding what was kept gives
    one colon per kept member plus the colons of the kept strings; the body has more
    exactly when the decoder dropped a member (its key and value with it). An escaped
    colon (``\\u003a``) in the body would hide one from that count: such rare bodies are
    parsed once more, by the standard library, keeping every member.
    """
    if _ESCAPED_COLONS[0] in body or _ESCAPED_COLONS[1] in body:
        return _pairs_repeat_a_key(body)
    return body.count(b":") > msgspec.json.encode(value).count(b":")


def _holds_nul(value: Any) -> bool:
    """Whether a string or key of ``value`` contains U+0000 (walked only when the body
    has the escape ``\\u0000`` at all)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            if any("\x00" in key for key in item):
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class _DuplicateKey(Exception):
    pass


def _refuse_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise _DuplicateKey
    return found


def _pairs_repeat_a_key(body: bytes) -> bool:
    try:
        json.loads(body, object_pairs_hook=_refuse_repeats)
    except _DuplicateKey:
        return True
    return False


def decode_as(body: Any, kind: type[T]) -> T:
    """Convert a decoded JSON body to a strict struct; 400 names the offending field."""
    try:
        return msgspec.convert(body, kind)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(str(exc)) from exc
