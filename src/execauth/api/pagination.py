"""The one parser of request parameters: integers, timestamps, text, cursors, months.

Every route that reads an integer or a time from the query string or a JSON body goes
through here, so each refusal is a 400 naming the parameter and no value reaches
Python's ``int``, ``datetime`` or the database unchecked (docs/decisions.md, "Bad
input"): digits only ASCII ``0``–``9`` (``int`` accepts ``²``'s cousins such as
Arabic-Indic digits, ``str.isdigit`` accepts ``²`` itself, which ``int`` refuses), at
most 19 of them (``int`` refuses over 4,300 digits, and 2^63 overflows PostgreSQL's
BIGINT), a range per parameter; timestamps RFC 3339 within years 1–9999 in UTC; no
U+0000 in text, which PostgreSQL cannot store.
"""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime
from typing import Any

import msgspec
from starlette.requests import Request

from execauth.errors import InvalidRequest
from execauth.tenancy.quota import month_bounds, month_period
from execauth.wire_time import parse_timestamp

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
# The widest column an integer parameter meets: BIGINT (log sizes, millisecond times).
MAX_BIGINT = 2**63 - 1
# INTEGER columns (policy versions).
MAX_INT32 = 2**31 - 1
MAX_TEXT_PARAMETER = 1024
_MAX_DIGITS = len(str(MAX_BIGINT))


def integer(value: object, name: str, *, minimum: int, maximum: int) -> int:
    """``value`` (query text or a decoded JSON number) as an int in [minimum, maximum]."""
    expected = f"{name} must be an integer from {minimum} to {maximum}"
    if isinstance(value, str):
        digits = value[1:] if value.startswith("-") else value
        if not (0 < len(digits) <= _MAX_DIGITS and digits.isascii() and digits.isdigit()):
            raise InvalidRequest(expected)
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidRequest(expected)
    if not minimum <= value <= maximum:
        raise InvalidRequest(expected)
    return value


def timestamp(value: object, name: str) -> datetime:
    """An RFC 3339 timestamp with a zone, as a UTC datetime; 400 naming ``name`` otherwise."""
    if not isinstance(value, str) or "\x00" in value:
        raise InvalidRequest(f"{name} must be an RFC 3339 timestamp")
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise InvalidRequest(f"{name} must be an RFC 3339 timestamp: {exc}") from exc


def optional_timestamp(value: str | None, name: str) -> datetime | None:
    return None if value is None else timestamp(value, name)


def text(value: object, name: str, *, max_length: int = MAX_TEXT_PARAMETER) -> str:
    """A string parameter the stores can hold: no U+0000, at most ``max_length`` long."""
    if not isinstance(value, str) or "\x00" in value or len(value) > max_length:
        raise InvalidRequest(
            f"{name} must be text of at most {max_length} characters without U+0000"
        )
    return value


def query_int(request: Request, name: str, *, minimum: int, maximum: int) -> int | None:
    """``?name=`` as an int in [minimum, maximum]; None when absent."""
    raw = request.query_params.get(name)
    return None if raw is None else integer(raw, name, minimum=minimum, maximum=maximum)


def required_query_int(request: Request, name: str, *, minimum: int, maximum: int) -> int:
    found = query_int(request, name, minimum=minimum, maximum=maximum)
    if found is None:
        raise InvalidRequest(f"{name} is required: an integer from {minimum} to {maximum}")
    return found


def query_text(request: Request, name: str) -> str | None:
    raw = request.query_params.get(name)
    return None if raw is None else text(raw, name)


def page_limit(request: Request) -> int:
    found = query_int(request, "limit", minimum=1, maximum=MAX_LIMIT)
    return DEFAULT_LIMIT if found is None else found


def time_param(request: Request, name: str) -> datetime | None:
    return optional_timestamp(request.query_params.get(name), name)


def month_param(request: Request) -> str:
    """``?month=YYYY-MM``, the current UTC month by default."""
    raw = request.query_params.get("month")
    if not raw:
        return month_period(datetime.now(UTC))
    try:
        month_bounds(text(raw, "month", max_length=7))
    except ValueError as exc:
        raise InvalidRequest(f"month: {exc}") from exc
    return raw


def encode_cursor(*position: Any) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode(list(position))).decode().rstrip("=")


def decode_cursor(text_: str, arity: int) -> list[Any]:
    """The position a cursor stands for; 400 for anything this service did not issue."""
    try:
        raw = base64.urlsafe_b64decode(text_ + "=" * (-len(text_) % 4))
        position = msgspec.json.decode(raw)
    except (binascii.Error, ValueError, msgspec.DecodeError) as exc:
        raise InvalidRequest("cursor is not one this service issued") from exc
    if not isinstance(position, list) or len(position) != arity:
        raise InvalidRequest("cursor is not one this service issued")
    return position


def cursor_position(request: Request, *kinds: type) -> tuple[Any, ...] | None:
    """``?cursor=`` decoded to values of ``kinds`` (int: a BIGINT, str: storable text)."""
    raw = request.query_params.get("cursor")
    if not raw:
        return None
    position = decode_cursor(text(raw, "cursor"), len(kinds))
    try:
        return tuple(
            integer(item, "cursor", minimum=-MAX_BIGINT, maximum=MAX_BIGINT)
            if kind is int
            else text(item, "cursor")
            for item, kind in zip(position, kinds, strict=True)
        )
    except InvalidRequest as exc:
        raise InvalidRequest("cursor is not one this service issued") from exc
