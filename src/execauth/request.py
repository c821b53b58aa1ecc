"""The execute request as the core sees it: one normalized value for every wire variant.

The gateway accepts variants A–D at once (docs/api.md, "The request"); this module
turns the decoded JSON body and the ``Idempotency-Key`` header into an
``ExecuteRequest`` or raises ``InvalidRequest`` naming the offending field.

Over HTTP the body was already refused at the door (``api.wire.read_json_body``) if it
repeats an object key or holds U+0000 in any string, which PostgreSQL cannot store: no
request reaching evaluation can fail to be stored (docs/decisions.md, "Bad input").
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from execauth.canonical import CanonicalizationError, canonical_form, canonical_json
from execauth.errors import InvalidRequest

SURFACE_PATTERN = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)+\Z")
MAX_SURFACE_LENGTH = 128
MAX_IDEMPOTENCY_KEY_LENGTH = 255
MAX_NAME_LENGTH = 256


@dataclass(frozen=True, slots=True)
class ExecuteRequest:
    surface: str
    action: str | None
    actor: str | None
    context: dict[str, Any]
    payload: dict[str, Any]
    idempotency_key: str | None
    digest: str  # sha256:<hex> of the RFC 8785 form of evaluation_input()
    # Whether evaluation_input() is plain JSON (canonical.canonical_form), learnt
    # while taking its digest; then every value in it converts to CEL, which policy
    # evaluation would otherwise walk the request to make sure of (policy.engine.evaluate).
    # False unless the parser learnt it: the side on which the walk is still made.
    plain: bool = False

    def evaluation_input(self) -> dict[str, Any]:
        """The normalized request: what policy sees and what ``request_digest`` covers."""
        return {
            "surface": self.surface,
            "action": self.action,
            "actor": self.actor,
            "context": self.context,
            "payload": self.payload,
        }


def is_valid_surface(value: object) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_SURFACE_LENGTH
        and SURFACE_PATTERN.match(value) is not None
    )


def parse_execute_request(body: object, idempotency_header: str | None) -> ExecuteRequest:
    """Normalize a decoded body (any variant) into an ``ExecuteRequest``."""
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")

    sent_as, surface = _one_of(body, "surface", "surface_id")
    if surface is None:
        raise InvalidRequest("missing required field: surface")
    if not isinstance(surface, str):
        raise InvalidRequest(f"field {sent_as!r} must be a string")
    if not is_valid_surface(surface):
        raise InvalidRequest(
            "field 'surface' must be dotted lowercase segments of [a-z0-9_-] "
            f"(e.g. deploy.production), at most {MAX_SURFACE_LENGTH} characters"
        )

    actor = _optional_string(body, "actor", "actorId")
    action = _optional_string(body, "action")
    context = _merged_context(body)
    payload = body.get("payload")
    if payload is None:
        payload = {}
    elif not isinstance(payload, dict):
        raise InvalidRequest("field 'payload' must be an object")

    idempotency_key = _idempotency_key(body, idempotency_header)
    normalized = {
        "surface": surface,
        "action": action,
        "actor": actor,
        "context": context,
        "payload": payload,
    }
    try:
        form, plain = canonical_form(normalized)
    except CanonicalizationError as exc:
        # A request we cannot canonicalize could not be signed or replayed exactly.
        raise InvalidRequest(f"request cannot be canonicalized (RFC 8785): {exc}") from exc
    digest = "sha256:" + hashlib.sha256(form).hexdigest()
    return ExecuteRequest(surface, action, actor, context, payload, idempotency_key, digest, plain)


def _one_of(body: Mapping[str, Any], *names: str) -> tuple[str, Any]:
    """(the alias the client sent, its value); two aliases with different values are a 400."""
    found: list[tuple[str, Any]] = [(n, body[n]) for n in names if body.get(n) is not None]
    if len(found) > 1 and any(not _same_json(v, found[0][1]) for _, v in found[1:]):
        raise InvalidRequest(f"fields {' and '.join(repr(n) for n, _ in found)} disagree")
    return found[0] if found else (names[0], None)


def _same_json(left: Any, right: Any) -> bool:
    """JSON equality: unlike Python's ``==``, ``true`` is not ``1`` and ``1`` is not ``1.0``."""
    try:
        return canonical_json(left) == canonical_json(right)
    except CanonicalizationError as exc:
        raise InvalidRequest(f"request cannot be canonicalized (RFC 8785): {exc}") from exc


def _optional_string(body: Mapping[str, Any], *names: str) -> str | None:
    sent_as, value = _one_of(body, *names)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequest(f"field {sent_as!r} must be a string")
    if not 0 < len(value) <= MAX_NAME_LENGTH:
        raise InvalidRequest(f"field {sent_as!r} must be 1 to {MAX_NAME_LENGTH} characters")
    return value


def _merged_context(body: Mapping[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for name in ("metadata", "context"):
        part = body.get(name)
        if part is None:
            continue
        if not isinstance(part, dict):
            raise InvalidRequest(f"field {name!r} must be an object")
        for key, value in part.items():
            if key in merged and not _same_json(merged[key], value):
                raise InvalidRequest(
                    f"key {key!r} appears in both 'metadata' and 'context' with different values"
                )
            merged[key] = value
    return merged


def _idempotency_key(body: Mapping[str, Any], header: str | None) -> str | None:
    values: dict[str, str] = {}
    for name in ("request_id", "idempotency_key"):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidRequest(f"field {name!r} must be a string")
        values[name] = value
    if header is not None:
        values["Idempotency-Key header"] = header
    distinct = set(values.values())
    if len(distinct) > 1:
        raise InvalidRequest(
            f"idempotency keys disagree: {', '.join(sorted(values))} carry different values"
        )
    if not distinct:
        return None
    key = distinct.pop()
    if not 0 < len(key) <= MAX_IDEMPOTENCY_KEY_LENGTH:
        raise InvalidRequest(
            f"idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters"
        )
    return key
