"""Approvals of ESCALATE decisions over HTTP (docs/approvals.md).

``GET /v1/approvals/{id}`` is for the key that requested the execution, with a bounded
long-poll (``?wait=30s``) so that clients wait without loops of their own. The operator
routes list, show, approve and reject; who may vote is the policy rule's to say
(``execauth.approvals``), so any key of the organization may try and is refused (403)
unless the rule names its role or its id.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from execauth.api.wire import json_response, read_json_body
from execauth.errors import Forbidden, InvalidRequest, NotFound
from execauth.policy.document import DURATION_PATTERN
from execauth.store.approvals import Approval, Ballot
from execauth.usecases.approve import Approvals
from execauth.usecases.execute import ExecutionService, Principal

MAX_WAIT_SECONDS = 60  # a long-poll longer than common proxy idle timeouts would be cut
POLL_INTERVAL_SECONDS = 0.25
MAX_REASON_CHARS = 1000
MAX_ACTOR_CHARS = 256
READERS = ("admin", "auditor")

Handler = Callable[[Request], Awaitable[Response]]


def wait_seconds(raw: str | None) -> float:
    """``?wait=`` as ``30s``, ``1m`` or a number of seconds, at most ``MAX_WAIT_SECONDS``."""
    if raw is None or raw == "":
        return 0.0
    seconds: int | None = None
    if raw.isdigit():
        seconds = int(raw)
    elif match := DURATION_PATTERN.match(raw):
        h, m, s = (int(g) if g else 0 for g in match.groups())
        seconds = h * 3600 + m * 60 + s
    if seconds is None or seconds > MAX_WAIT_SECONDS:
        raise InvalidRequest(
            f"wait must be a duration such as '30s', at most {MAX_WAIT_SECONDS}s, not {raw!r}"
        )
    return float(seconds)


def approval_routes(
    service: ExecutionService, approvals: Approvals, surface: str, max_body: int
) -> list[BaseRoute]:
    """The ``gateway`` route (the requester's view) or the ``operator`` ones.

    ``service`` authenticates the caller; ``approvals`` reads and votes.
    """

    async def caller(request: Request) -> Principal:
        return await service.authenticate(request.headers.get("authorization"))

    async def requester_view(request: Request) -> Response:
        principal = await caller(request)
        wait = wait_seconds(request.query_params.get("wait"))
        approval_id = request.path_params["approval_id"]
        approval = await _own(principal, approval_id)
        deadline = anyio.current_time() + wait
        # Polls the store (cheap, indexed) rather than a notification: votes may land on
        # another instance; the bound keeps every request short.
        while approval.state == "pending" and anyio.current_time() < deadline:
            await anyio.sleep(min(POLL_INTERVAL_SECONDS, deadline - anyio.current_time()))
            approval = await _own(principal, approval_id)
        return json_response(approval.as_json())

    async def _own(principal: Principal, approval_id: str) -> Approval:
        approval = await approvals.get(principal.org.org_id, _checked_id(approval_id))
        if approval.terms.requester_key_id != principal.api_key.key_id:
            # Not 403: another key of the org learns nothing about which approvals exist.
            raise NotFound("no such approval for this API key")
        return approval

    async def list_pending(request: Request) -> Response:
        principal = await _reader(request)
        found = await approvals.pending(principal.org.org_id)
        return json_response({"items": [a.as_json() for a in found if a.state == "pending"]})

    async def show(request: Request) -> Response:
        principal = await _reader(request)
        approval_id = _checked_id(request.path_params["approval_id"])
        return json_response((await approvals.get(principal.org.org_id, approval_id)).as_json())

    async def _reader(request: Request) -> Principal:
        principal = await caller(request)
        if principal.api_key.role not in READERS:
            raise Forbidden(f"a key with role {principal.api_key.role!r} cannot list approvals")
        return principal

    def voter(vote: str) -> Handler:
        async def cast(request: Request) -> Response:
            principal = await caller(request)
            approval_id = _checked_id(request.path_params["approval_id"])
            body = await read_json_body(request, max_body)
            reason, actor = _ballot_fields(body, required_reason=vote == "reject")
            ballot = Ballot(principal.api_key.key_id, principal.api_key.role, vote, actor, reason)
            approval = await approvals.vote(principal.org.org_id, approval_id, ballot)
            return json_response(approval.as_json())

        return cast

    if surface == "gateway":
        return [Route("/v1/approvals/{approval_id}", requester_view, methods=["GET"])]
    return [
        Route("/operator/approvals", list_pending, methods=["GET"]),
        Route("/operator/approvals/{approval_id}", show, methods=["GET"]),
        Route("/operator/approvals/{approval_id}/approve", voter("approve"), methods=["POST"]),
        Route("/operator/approvals/{approval_id}/reject", voter("reject"), methods=["POST"]),
    ]


def _checked_id(approval_id: str) -> str:
    if not approval_id.startswith("service_appr_") or len(approval_id) != 39:
        raise NotFound("no such approval in this organization")
    return approval_id


def _ballot_fields(body: object, *, required_reason: bool) -> tuple[str, str | None]:
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object with 'reason' (and 'actor')")
    unknown = set(body) - {"reason", "actor"}
    if unknown:
        raise InvalidRequest(f"unknown field(s) {', '.join(sorted(unknown))}")
    reason = body.get("reason", "")
    if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
        raise InvalidRequest(f"reason must be a string of at most {MAX_REASON_CHARS} characters")
    if required_reason and not reason.strip():
        raise InvalidRequest("a rejection needs a reason")
    actor = body.get("actor")
    if actor is not None and (not isinstance(actor, str) or not 0 < len(actor) <= MAX_ACTOR_CHARS):
        raise InvalidRequest(f"actor must be a string of 1-{MAX_ACTOR_CHARS} characters")
    return reason, actor
