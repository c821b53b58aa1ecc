"""Query parameters of the list endpoints: keyset cursors, page size, times, month."""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime
from typing import Any

import msgspec
from starlette.requests import Request

from execauth.errors import InvalidRequest
from execauth.tenancy.quota import month_period
from execauth.wire_time import parse_timestamp

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def encode_cursor(*position: Any) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode(list(position))).decode().rstrip("=")


def decode_cursor(text: str, arity: int) -> list[Any]:
    """The position a cursor stands for; 400 for anything this service did not issue."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        position = msgspec.json.decode(raw)
    except (binascii.Error, ValueError, msgspec.DecodeError) as exc:
        raise InvalidRequest("cursor is not one this service issued") from exc
    if not isinstance(position, list) or len(position) != arity:
        raise InvalidRequest("cursor is not one this service issued")
    return position


def page_limit(request: Request) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return DEFAULT_LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be an integer from 1 to {MAX_LIMIT}")
    return int(raw)


def month_param(request: Request) -> str:
    """``?month=YYYY-MM``, the current UTC month by default (validated where it is used)."""
    return request.query_params.get("month") or month_period(datetime.now(UTC))


def time_param(request: Request, name: str) -> datetime | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        return parse_timestamp(raw)
    except ValueError as exc:
        raise InvalidRequest(f"{name} must be an RFC 3339 timestamp") from exc
