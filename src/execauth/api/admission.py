"""Admission for heavy operator work: no organization can starve the gateway.

Replays, impact analyses, exports and history listings read and re-evaluate up to
100,000 stored executions in a worker thread. Unbounded, twenty of them at once (one
read-only key sufficed) held the GIL against the event loop that answers
``/v1/execute``, which then took 22.9 s. Here every such route passes three bounds
before it runs (docs/operations.md, "Operator work"; docs/decisions.md):

1. a rate per organization: ``operator_requests_per_minute`` heavy requests (the
   gateway's limiter and storage, a counter of its own), else 429 ``rate_limited``;
2. a concurrency per organization: at most ``operator_concurrency_per_org`` at once
   in this process, else 429 at once (``Retry-After: 1``): waiting would hold a
   connection per excess request;
3. a lane per serving process: at most ``operator_concurrency`` heavy requests of
   all organizations run at once; the others wait their turn for up to
   ``operator_queue_seconds``, then get 429 with ``Retry-After``.

So at most ``operator_concurrency`` threads of a process do heavy work, whatever the
callers do, and the event loop shares the GIL with that many, not with twenty. The
bounds apply to authenticated callers only: a request the route would refuse
(unknown key, wrong token) goes straight to the route and gets its 401.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import anyio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from execauth.errors import RateLimited
from execauth.serving.runtime import Runtime
from execauth.usecases.execute import ExecutionService

Endpoint = Callable[[Request], Awaitable[Response]]
Content = str | bytes | memoryview

# (method, route path) of the heavy routes: whole-range reads and re-evaluations.
HEAVY_ROUTES = frozenset(
    {
        ("POST", "/operator/replay"),
        ("POST", "/operator/executions/{execution_id}/replay"),
        ("GET", "/operator/executions"),
        ("GET", "/operator/audit"),
        ("GET", "/operator/usage"),
        ("POST", "/console/v1/orgs/{org_id}/replay"),
        ("POST", "/console/v1/orgs/{org_id}/executions/{execution_id}/replay"),
        ("GET", "/console/v1/orgs/{org_id}/export"),
        ("GET", "/console/v1/orgs/{org_id}/usage"),
    }
)


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    per_org: int = 2
    per_process: int = 2
    queue_seconds: float = 5.0
    per_minute: int = 60


def admission_limits(runtime: Runtime) -> AdmissionLimits:
    settings = runtime.settings
    return AdmissionLimits(
        per_org=settings.operator_concurrency_per_org,
        per_process=settings.operator_concurrency,
        queue_seconds=settings.operator_queue_seconds,
        per_minute=settings.operator_requests_per_minute,
    )


class OperatorAdmission:
    def __init__(self, service: ExecutionService, limits: AdmissionLimits) -> None:
        self._service = service
        self._limits = limits
        self._running: dict[str, int] = {}
        self._lane = anyio.Semaphore(limits.per_process)

    async def admit(self, org_id: str) -> Ticket:
        """One of ``org_id``'s heavy slots and a place in the lane, or ``RateLimited``."""
        limits = self._limits
        # Its own counter in the gateway's limiter ("operator/<org>"): heavy work does
        # not use up the org's execute rate, nor executes its operator rate.
        await self._service.rate_limiter.hit("operator/" + org_id, limits.per_minute)
        running = self._running.get(org_id, 0)
        if running >= limits.per_org:
            raise RateLimited(
                f"at most {limits.per_org} replays, exports or listings at once per organization",
                headers={"Retry-After": "1"},
            )
        self._running[org_id] = running + 1
        try:
            with anyio.fail_after(limits.queue_seconds):
                await self._lane.acquire()
        except BaseException as exc:
            self._leave(org_id)
            if isinstance(exc, TimeoutError):
                raise RateLimited(
                    "the service is busy with other operator work; retry later",
                    headers={"Retry-After": str(math.ceil(limits.queue_seconds))},
                ) from None
            raise
        return Ticket(self, org_id)

    def _leave(self, org_id: str) -> None:
        left = self._running[org_id] - 1
        if left:
            self._running[org_id] = left
        else:
            del self._running[org_id]

    def guard(self, endpoint: Endpoint) -> Endpoint:
        """``endpoint`` behind ``admit`` for its caller's organization."""

        async def guarded(request: Request) -> Response:
            org_id = await self._caller_org(request)
            if org_id is None:
                return await endpoint(request)  # the route refuses it (401) itself
            ticket = await self.admit(org_id)
            try:
                response = await endpoint(request)
            except BaseException:
                ticket.release()
                raise
            if isinstance(response, StreamingResponse):
                # An export streams after the handler returned: hold the slot until the
                # last chunk is sent (or the client goes away).
                response.body_iterator = _released_after(response.body_iterator, ticket)
            else:
                ticket.release()
            return response

        return guarded

    async def _caller_org(self, request: Request) -> str | None:
        path_org = request.path_params.get("org_id")
        if path_org is not None:  # the console: the platform administrator's token
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            valid = scheme.lower() == "bearer" and self._service.runtime.admin.check(token.strip())
            return str(path_org) if valid else None
        # The operator surface: the org of the key (cached; the route checks the role).
        caller = await self._service.authenticate(request.headers.get("authorization"))
        return caller.org.org_id


class Ticket:
    """An admitted heavy request; ``release`` (once) gives its slot and lane place back."""

    def __init__(self, admission: OperatorAdmission, org_id: str) -> None:
        self._admission = admission
        self._org_id = org_id
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._admission._lane.release()
            self._admission._leave(self._org_id)


async def _released_after(chunks: AsyncIterable[Content], ticket: Ticket) -> AsyncIterator[Content]:
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        ticket.release()


def guard_heavy_routes(routes: list[BaseRoute], admission: OperatorAdmission) -> list[BaseRoute]:
    """``routes`` with every heavy route (``HEAVY_ROUTES``) behind ``admission``."""
    guarded: list[BaseRoute] = []
    for route in routes:
        methods = (route.methods or set()) if isinstance(route, Route) else set()
        if isinstance(route, Route) and any((m, route.path) in HEAVY_ROUTES for m in methods):
            route = Route(
                route.path,
                admission.guard(route.endpoint),
                methods=sorted(methods - {"HEAD"}),
                name=route.name,
            )
        guarded.append(route)
    return guarded
