"""Fail-closed helpers: proceed only under an authentic, unexpired, matching PERMIT."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from execauth_client.errors import NotPermitted, UnexpectedResponse, VerificationFailed
from execauth_client.receipt import Receipt
from execauth_client.verify import MALFORMED_RECEIPT, KeyList, Verdict, unmet_expectations, verify

if TYPE_CHECKING:
    from execauth_client.client import AsyncClient, Client

P = ParamSpec("P")
R = TypeVar("R")
MISMATCH = "mismatch"


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
) -> Receipt:
    """Verify ``receipt`` offline against ``keys`` and return it only if it is an authentic,
    unexpired PERMIT matching ``surface``/``actor``/``request_digest`` (those given);
    otherwise raise ``VerificationFailed`` or ``NotPermitted``."""
    verdict = verify(receipt, keys, now=now)
    return enforce_permit(
        receipt, verdict, surface=surface, actor=actor, request_digest=request_digest
    )


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
    before the function body runs. Works on ``def`` functions with a ``Client`` and on
    ``async def`` functions with an ``AsyncClient``.
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
