"""Fail-closed helpers: proceed only under an authentic, unexpired, matching PERMIT.

A PERMIT that says ``single_use: true`` is consumed (``POST /v1/receipts/{id}/consume``)
before the guarded work runs: only the first consumer, across every instance of the
service, may act; a refusal (409: used already, expired; 404) or any failure to reach
the service raises, so the work does not run.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

import httpx

from execauth_client.errors import (
    ExecauthError,
    NotPermitted,
    ReceiptNotUsable,
    UnexpectedResponse,
    VerificationFailed,
)
from execauth_client.receipt import Receipt
from execauth_client.verify import MALFORMED_RECEIPT, KeyList, Verdict, unmet_expectations, verify

if TYPE_CHECKING:
    from execauth_client.client import AsyncClient, Client

P = ParamSpec("P")
R = TypeVar("R")
MISMATCH = "mismatch"
CONSUME_PATH = "/v1/receipts/{receipt_id}/consume"
ALREADY_CONSUMED = "receipt_already_consumed"


def consume_request(
    receipt: Receipt, actor: str | None, note: str | None
) -> tuple[str, dict[str, Any]]:
    """The path and JSON body of the consume request for ``receipt``."""
    body = {k: v for k, v in (("actor", actor), ("note", note)) if v is not None}
    return CONSUME_PATH.format(receipt_id=receipt.receipt_id), body


def consumption_or_error(response: httpx.Response, receipt: Receipt) -> dict[str, Any]:
    """The consumption (200), or the refusal as an error: never a silent success."""
    from execauth_client import _wire

    if response.status_code == 200:
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or body.get("receipt_id") != receipt.receipt_id:
            raise UnexpectedResponse("the answer is not this receipt's consumption", status=200)
        return body
    error: ExecauthError = _wire.error_for(response)
    if response.status_code in (404, 409):
        raise ReceiptNotUsable(
            f"the PERMIT cannot be used: {error.message}",
            receipt,
            code=error.code,
            status=response.status_code,
            consumed=_earlier(response) if error.code == ALREADY_CONSUMED else None,
        )
    raise error


def _earlier(response: httpx.Response) -> dict[str, Any] | None:
    """``details[0]`` of a 409 (profile A or B): who used the receipt, and when."""
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    details = error.get("details") if isinstance(error, dict) else body.get("details")
    if isinstance(details, list) and details and isinstance(details[0], dict):
        return details[0]
    return None


def enforce_permit(
    receipt: Receipt | Mapping[str, Any],
    verdict: Verdict,
    *,
    surface: str | None = None,
    actor: str | None = None,
    request_digest: str | None = None,
) -> Receipt:
    """Given ``verdict`` for ``receipt``: the receipt if it permits the work, else raise.

    Order: authentic (``VerificationFailed``), about this request (``VerificationFailed``
    with reason ``mismatch``), a PERMIT (``NotPermitted``), unexpired (``NotPermitted``).
    """
    parsed: Receipt | None
    try:
        parsed = receipt if isinstance(receipt, Receipt) else Receipt.from_dict(receipt)
    except UnexpectedResponse:
        parsed = None
    if not verdict.authentic:
        raise VerificationFailed(
            f"receipt is not authentic: {verdict.reason}: {verdict.detail}", verdict, parsed
        )
    if parsed is None:
        bad = Verdict(False, MALFORMED_RECEIPT, "receipt has no receipt_id", verdict.key_id)
        raise VerificationFailed("receipt has no receipt_id", bad)
    problems = unmet_expectations(
        parsed, surface=surface, actor=actor, request_digest=request_digest
    )
    if problems:
        mismatch = Verdict(False, MISMATCH, "; ".join(problems), verdict.key_id, verdict.decision)
        raise VerificationFailed(
            "receipt does not match the request: " + mismatch.detail, mismatch, parsed
        )
    if parsed.decision != "PERMIT":
        why = parsed.policy_reason or parsed.reason_code or "no reason given"
        raise NotPermitted(
            f"{parsed.decision} ({why}): {parsed.message or ''}".rstrip(": "), parsed
        )
    if verdict.expired:
        raise NotPermitted(f"PERMIT expired at {parsed.expires_at}", parsed)
    return parsed


def require_permit(
    receipt: Receipt | Mapping[str, Any],
    *,
    keys: KeyList | Mapping[str, Any],
    surface: str | None = None,
    actor: str | None = None,
    request_digest: str | None = None,
    now: datetime | None = None,
    consumer: Client | None = None,
    defer_consumption: bool = False,
) -> Receipt:
    """Verify ``receipt`` offline against ``keys`` and return it only if it is an authentic,
    unexpired PERMIT matching ``surface``/``actor``/``request_digest`` (those given);
    otherwise raise ``VerificationFailed`` or ``NotPermitted``.

    A ``single_use`` PERMIT is consumed through ``consumer`` first (``ReceiptNotUsable``
    if the service refuses); with no ``consumer`` it is refused, since nothing else
    would stop it being used twice. ``defer_consumption``: the caller consumes it itself
    before acting (the MCP gateway does, after its constraint check).
    """
    verdict = verify(receipt, keys, now=now)
    permit = enforce_permit(
        receipt, verdict, surface=surface, actor=actor, request_digest=request_digest
    )
    if permit.single_use and not defer_consumption:
        if consumer is None:
            raise NotPermitted(
                "a single-use PERMIT must be consumed before acting: pass consumer=", permit
            )
        consumer.consume(permit, actor=actor)
    return permit


def guarded(
    client: Client | AsyncClient,
    *,
    surface: str,
    actor: str | None = None,
    action: str | None = None,
    context_from: Callable[..., Mapping[str, Any] | None] | None = None,
    payload_from: Callable[..., Mapping[str, Any] | None] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Run the decorated function only under a verified PERMIT for ``surface``.

    Each call asks the service first (with a fresh idempotency key); ``context_from`` and
    ``payload_from`` receive the call's arguments and build the request's context and
    payload. Anything but an authentic, unexpired PERMIT for exactly that request raises
    before the function body runs; a ``single_use`` PERMIT is consumed first (the client's
    ``require_permit`` does it), and a refused or failed consumption raises too. Works on
    ``def`` functions with a ``Client`` and on ``async def`` functions with an
    ``AsyncClient``.
    """
    from execauth_client.client import AsyncClient

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        is_async = inspect.iscoroutinefunction(fn)
        if is_async != isinstance(client, AsyncClient):
            raise TypeError(
                "guarded: use an AsyncClient with async functions and a Client with plain ones"
            )

        def request(*args: Any, **kwargs: Any) -> dict[str, Any]:
            return {
                "actor": actor,
                "action": action,
                "context": context_from(*args, **kwargs) if context_from else None,
                "payload": payload_from(*args, **kwargs) if payload_from else None,
            }

        if isinstance(client, AsyncClient):
            async_client = client
            async_fn = cast(Callable[..., Awaitable[Any]], fn)

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                await async_client.require_permit(surface, **request(*args, **kwargs))
                return await async_fn(*args, **kwargs)

            return cast(Callable[P, R], run_async)

        sync_client = client

        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            sync_client.require_permit(surface, **request(*args, **kwargs))
            return fn(*args, **kwargs)

        return run

    return decorate
