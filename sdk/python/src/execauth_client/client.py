"""``Client`` and ``AsyncClient``: authorize against the gateway, verify with cached keys.

Both share ``_wire`` (bodies, error mapping, backoff) and ``_keycache`` (when to
refetch keys), so they differ only in how they wait and do I/O.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, Self

import httpx

from execauth_client import _wire
from execauth_client._keycache import KeyCache
from execauth_client.errors import ServiceUnavailable, UnexpectedResponse
from execauth_client.guard import consume_request, consumption_or_error, enforce_permit
from execauth_client.receipt import Receipt
from execauth_client.verify import UNKNOWN_KEY, KeyList, KeyListError, Verdict, verify

USER_AGENT = "execauth-client-python/0.1.0"


def _keys_from(response: httpx.Response) -> KeyList:
    if response.status_code != 200:
        raise _wire.error_for(response)
    try:
        return KeyList.from_document(response.json())
    except (ValueError, KeyListError) as exc:
        raise UnexpectedResponse(f"not a key list: {exc}", status=200) from exc


class _Base:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        max_retries: int,
        cache_ttl: float | None,
        backoff: _wire.Backoff | None,
        clock: Callable[[], float],
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._auth = {"Authorization": f"Bearer {api_key}"}
        self.max_retries = max_retries
        self._backoff = backoff or _wire.Backoff()
        self._cache = KeyCache(ttl=cache_ttl, clock=clock)
        self._clock = clock

    def _execute_request(
        self,
        surface: str,
        actor: str | None,
        action: str | None,
        context: Mapping[str, Any] | None,
        payload: Mapping[str, Any] | None,
        idempotency_key: str | None,
    ) -> dict[str, Any]:
        key = idempotency_key or str(uuid.uuid4())  # the same key on every retry
        body = _wire.execute_body(
            surface,
            actor=actor,
            action=action,
            context=context,
            payload=payload,
            idempotency_key=key,
        )
        return {"json": body, "headers": self._auth | {"Idempotency-Key": key}}

    def _next_delay(self, attempt: int, outcome: httpx.Response | Exception) -> float | None:
        """Seconds to wait before retrying, or ``None`` to stop and surface ``outcome``."""
        if attempt >= self.max_retries:
            return None
        if isinstance(outcome, httpx.Response):
            if not _wire.should_retry(outcome):
                return None
            return self._backoff.delay(attempt, _wire.retry_after(outcome))
        return self._backoff.delay(attempt, None)

    def _unreachable(self, exc: Exception) -> ServiceUnavailable:
        return ServiceUnavailable(f"cannot reach {self.base_url}: {exc}", code="unreachable")


class Client(_Base):
    """Synchronous client. ``sleep``, ``clock`` and ``transport`` are injectable for tests."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 10,
        max_retries: int = 3,
        cache_ttl: float | None = None,
        transport: httpx.BaseTransport | None = None,
        backoff: _wire.Backoff | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            base_url,
            api_key,
            max_retries=max_retries,
            cache_ttl=cache_ttl,
            backoff=backoff,
            clock=clock,
        )
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,
            headers={"User-Agent": USER_AGENT},
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        attempt = 0
        while True:
            outcome: httpx.Response | Exception
            try:
                outcome = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                outcome = exc
            delay = self._next_delay(attempt, outcome)
            if delay is None:
                if isinstance(outcome, Exception):
                    raise self._unreachable(outcome) from outcome
                return outcome
            self._sleep(delay)
            attempt += 1

    def authorize(
        self,
        surface: str,
        *,
        actor: str | None = None,
        action: str | None = None,
        context: Mapping[str, Any] | None = None,
        payload: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        wait_for_approval: float | None = None,
    ) -> Receipt:
        """Ask for a decision. PERMIT, DENY, SILENCE and ESCALATE all return a ``Receipt``
        (profile A or B); errors raise. The receipt is *not* verified: use ``require_permit``.

        ``wait_for_approval`` (seconds): on ESCALATE, wait up to that long for the approval
        (server-side long-polls, no busy loop) and return its outcome receipt, a PERMIT or
        a DENY; still pending then, the ESCALATE receipt itself (never a permission).
        """
        request = self._execute_request(surface, actor, action, context, payload, idempotency_key)
        receipt = _wire.receipt_or_error(self._send("POST", _wire.EXECUTE_PATH, **request))
        if receipt.decision != "ESCALATE" or not wait_for_approval or not receipt.approval_id:
            return receipt
        deadline = self._clock() + wait_for_approval
        while (remaining := deadline - self._clock()) > 0:
            wait = max(1, min(_wire.MAX_APPROVAL_WAIT, int(remaining)))
            answer = self._send(
                "GET", _wire.APPROVALS_PATH + receipt.approval_id,
                params={"wait": f"{wait}s"}, headers=self._auth, timeout=wait + 10,
            )  # fmt: skip
            state, outcome = _wire.approval_outcome(answer)
            if outcome is not None:
                return outcome
            if state != "pending":
                break
        return receipt

    def keys(self, *, refresh: bool = False) -> KeyList:
        """The service's key list, from cache while fresh."""
        cached = None if refresh else self._cache.fresh()
        if cached is not None:
            return cached
        return self._cache.store(_keys_from(self._send("GET", _wire.KEYS_PATH)))

    def verify(
        self, receipt: Receipt | Mapping[str, Any], *, now: datetime | None = None
    ) -> Verdict:
        """Verify offline with the cached key list; refetch it once for an unknown key."""
        verdict = verify(receipt, self.keys(), now=now)
        if verdict.reason == UNKNOWN_KEY and self._cache.may_refresh_for_unknown_key():
            verdict = verify(receipt, self.keys(refresh=True), now=now)
        return verdict

    def require_permit(
        self,
        surface: str,
        *,
        actor: str | None = None,
        action: str | None = None,
        context: Mapping[str, Any] | None = None,
        payload: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        now: datetime | None = None,
        wait_for_approval: float | None = None,
        defer_consumption: bool = False,
    ) -> Receipt:
        """Authorize, verify, and return the receipt only if it is an authentic, unexpired
        PERMIT for exactly this request; otherwise raise (fail closed).

        A ``single_use`` PERMIT is consumed before it is returned (``consume``), unless
        ``defer_consumption``: then the caller must consume it before acting."""
        receipt = self.authorize(
            surface,
            actor=actor,
            action=action,
            context=context,
            payload=payload,
            idempotency_key=idempotency_key,
            wait_for_approval=wait_for_approval,
        )
        digest = _wire.request_digest(
            surface, actor=actor, action=action, context=context, payload=payload
        )
        verdict = self.verify(receipt, now=now)
        permit = enforce_permit(
            receipt, verdict, surface=surface, actor=actor, request_digest=digest
        )
        if permit.single_use and not defer_consumption:
            self.consume(permit, actor=actor)
        return permit

    def consume(
        self,
        receipt: Receipt | Mapping[str, Any],
        *,
        actor: str | None = None,
        note: str | None = None,
    ) -> dict[str, Any]:
        """Use the PERMIT once (``POST /v1/receipts/{id}/consume``): the consumption, or
        ``ReceiptNotUsable`` (used already, expired, not a PERMIT, unknown) or another
        error. A retry after a lost answer can find its own earlier use: refused too."""
        parsed = receipt if isinstance(receipt, Receipt) else Receipt.from_dict(receipt)
        path, body = consume_request(parsed, actor, note)
        answer = self._send("POST", path, json=body, headers=self._auth)
        return consumption_or_error(answer, parsed)


class AsyncClient(_Base):
    """The same client for asyncio; ``sleep`` must be an async callable."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 10,
        max_retries: int = 3,
        cache_ttl: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        backoff: _wire.Backoff | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            base_url,
            api_key,
            max_retries=max_retries,
            cache_ttl=cache_ttl,
            backoff=backoff,
            clock=clock,
        )
        self._sleep = sleep
        self._keys_lock = asyncio.Lock()
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,
            headers={"User-Agent": USER_AGENT},
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        attempt = 0
        while True:
            outcome: httpx.Response | Exception
            try:
                outcome = await self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                outcome = exc
            delay = self._next_delay(attempt, outcome)
            if delay is None:
                if isinstance(outcome, Exception):
                    raise self._unreachable(outcome) from outcome
                return outcome
            await self._sleep(delay)
            attempt += 1

    async def authorize(
        self,
        surface: str,
        *,
        actor: str | None = None,
        action: str | None = None,
        context: Mapping[str, Any] | None = None,
        payload: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        wait_for_approval: float | None = None,
    ) -> Receipt:
        """See ``Client.authorize``."""
        request = self._execute_request(surface, actor, action, context, payload, idempotency_key)
        receipt = _wire.receipt_or_error(await self._send("POST", _wire.EXECUTE_PATH, **request))
        if receipt.decision != "ESCALATE" or not wait_for_approval or not receipt.approval_id:
            return receipt
        deadline = self._clock() + wait_for_approval
        while (remaining := deadline - self._clock()) > 0:
            wait = max(1, min(_wire.MAX_APPROVAL_WAIT, int(remaining)))
            answer = await self._send(
                "GET", _wire.APPROVALS_PATH + receipt.approval_id,
                params={"wait": f"{wait}s"}, headers=self._auth, timeout=wait + 10,
            )  # fmt: skip
            state, outcome = _wire.approval_outcome(answer)
            if outcome is not None:
                return outcome
            if state != "pending":
                break
        return receipt

    async def keys(self, *, refresh: bool = False) -> KeyList:
        """See ``Client.keys``; concurrent callers share one fetch."""
        async with self._keys_lock:
            cached = None if refresh else self._cache.fresh()
            if cached is not None:
                return cached
            return self._cache.store(_keys_from(await self._send("GET", _wire.KEYS_PATH)))

    async def verify(
        self, receipt: Receipt | Mapping[str, Any], *, now: datetime | None = None
    ) -> Verdict:
        """See ``Client.verify``."""
        verdict = verify(receipt, await self.keys(), now=now)
        if verdict.reason == UNKNOWN_KEY and self._cache.may_refresh_for_unknown_key():
            verdict = verify(receipt, await self.keys(refresh=True), now=now)
        return verdict

    async def require_permit(
        self,
        surface: str,
        *,
        actor: str | None = None,
        action: str | None = None,
        context: Mapping[str, Any] | None = None,
        payload: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        now: datetime | None = None,
        wait_for_approval: float | None = None,
        defer_consumption: bool = False,
    ) -> Receipt:
        """See ``Client.require_permit``."""
        receipt = await self.authorize(
            surface,
            actor=actor,
            action=action,
            context=context,
            payload=payload,
            idempotency_key=idempotency_key,
            wait_for_approval=wait_for_approval,
        )
        digest = _wire.request_digest(
            surface, actor=actor, action=action, context=context, payload=payload
        )
        verdict = await self.verify(receipt, now=now)
        permit = enforce_permit(
            receipt, verdict, surface=surface, actor=actor, request_digest=digest
        )
        if permit.single_use and not defer_consumption:
            await self.consume(permit, actor=actor)
        return permit

    async def consume(
        self,
        receipt: Receipt | Mapping[str, Any],
        *,
        actor: str | None = None,
        note: str | None = None,
    ) -> dict[str, Any]:
        """See ``Client.consume``."""
        parsed = receipt if isinstance(receipt, Receipt) else Receipt.from_dict(receipt)
        path, body = consume_request(parsed, actor, note)
        answer = await self._send("POST", path, json=body, headers=self._auth)
        return consumption_or_error(answer, parsed)
