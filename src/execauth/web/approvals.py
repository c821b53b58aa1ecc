"""The console's approvals inbox: what people are asked to approve, and their votes.

Pending approvals of the signed-in key's organization, each with what is asked (surface,
action, actor, context, the policy rule), the votes so far against the quorum, and
approve / reject buttons with a reason; the approvals decided most recently below.
A vote is the operator API's: ``ApprovalStore.vote`` with the session's key as the
ballot's key, so who may approve, self-approval, each approver once, a final rejection
and expiry are the rules of ``execauth.approvals``, applied in the same locked
transaction (docs/approvals.md). A refused vote is shown on the approval's page with
its reason and status; nothing here decides on its own.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from execauth.api.approval_routes import MAX_ACTOR_CHARS, MAX_REASON_CHARS
from execauth.approvals import refusal
from execauth.errors import ApprovalClosed, Forbidden, InvalidRequest, NotFound
from execauth.store.approvals import Approval, Ballot
from execauth.usecases.approve import Approvals
from execauth.web.auth import READERS, ConsoleAuth, Operator
from execauth.web.rendering import Renderer, page_route

# Bounded pages: each approval is read (and an expired one settled) on its own.
PENDING_SHOWN = 50
RECENT_SHOWN = 20
VOTES = ("approve", "reject")
# service_appr_ + a ULID; anything else is no approval (and never reaches the database).
_APPROVAL_ID = re.compile(r"^service_appr_[0-9A-Za-z]{26}$")


def approval_pages(approvals: Approvals, *, renderer: Renderer, auth: ConsoleAuth) -> list[Route]:

    def view(approval: Approval, operator: Operator) -> dict[str, Any]:
        """The approval as the API shows it, plus whether this session may vote and why not."""
        shown = approval.as_json()
        outcome = shown["outcome_receipt"]
        shown["outcome_execution_id"] = outcome["execution_id"] if outcome else None
        shown["decided_at"] = outcome["timestamp"] if outcome else None
        # Only to hide buttons that would be refused; the vote itself is checked again, locked.
        why_not = refusal(
            approval.terms, approval.votes, key_id=operator.key.key_id,
            role=operator.key.role, actor=None,
        )  # fmt: skip
        shown["why_not"] = why_not if approval.state == "pending" else None
        shown["can_vote"] = approval.state == "pending" and why_not is None
        return shown

    async def read(org_id: str, approval_id: str) -> Approval:
        if not _APPROVAL_ID.match(approval_id):
            raise NotFound("no such approval in this organization")
        return await approvals.get(org_id, approval_id)

    @auth.page()
    async def inbox(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        org_id = operator.org.org_id
        # Reading settles an approval whose deadline has passed: it moves to "recent".
        pending = await approvals.pending(org_id, PENDING_SHOWN)
        recent = await approvals.decided(org_id, RECENT_SHOWN)
        context: dict[str, Any] = {
            "operator": operator,
            "path": request.url.path,
            "pending": [view(a, operator) for a in pending if a.state == "pending"],
            "recent": [view(a, operator) for a in recent],
            "more_pending": len(pending) == PENDING_SHOWN,
        }
        return renderer.page("approvals.html", context)

    def detail(
        request: Request,
        operator: Operator,
        approval: Approval,
        *,
        error: str | None = None,
        status: int = 200,
        form: dict[str, str] | None = None,
    ) -> Response:
        voted = request.query_params.get("voted")
        context: dict[str, Any] = {
            "operator": operator,
            "path": request.url.path,
            "a": view(approval, operator),
            "error": error,
            "voted": voted if voted in VOTES else None,
            "form": form or {},
        }
        return renderer.page("approval.html", context, status)

    @auth.page()
    async def one(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        approval = await read(operator.org.org_id, request.path_params["approval_id"])
        return detail(request, operator, approval)

    def voter(vote: str) -> Any:
        # Every console role may try: the policy rule names who approves (a rule may name
        # auditors or one key), exactly as with the operator API.
        @auth.page(READERS)
        async def cast(request: Request, operator: Operator, form: dict[str, str]) -> Response:
            org_id = operator.org.org_id
            approval_id = request.path_params["approval_id"]
            await read(org_id, approval_id)  # 404 before any form error
            try:
                reason, actor = _ballot_fields(form, required_reason=vote == "reject")
                ballot = Ballot(operator.key.key_id, operator.key.role, vote, actor, reason)
                await approvals.vote(org_id, approval_id, ballot)
            except (Forbidden, ApprovalClosed, InvalidRequest) as exc:
                # Shown on the approval's page, which says why, keeps what was typed and
                # shows the state as it is now (an expiry found by the vote is settled).
                current = await read(org_id, approval_id)
                return detail(request, operator, current, error=exc.message,
                              status=exc.status, form=form)  # fmt: skip
            target = f"/console/approvals/{approval_id}?" + urlencode({"voted": vote})
            return RedirectResponse(target, 303)

        return cast

    return [
        page_route("/console/approvals", inbox, "GET"),
        page_route("/console/approvals/{approval_id}", one, "GET"),
        page_route("/console/approvals/{approval_id}/approve", voter("approve"), "POST"),
        page_route("/console/approvals/{approval_id}/reject", voter("reject"), "POST"),
    ]


def _ballot_fields(form: dict[str, str], *, required_reason: bool) -> tuple[str, str | None]:
    """The form's reason and optional actor, with the operator API's limits."""
    reason = form.get("reason", "").strip()
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidRequest(f"the reason must be at most {MAX_REASON_CHARS} characters")
    if required_reason and not reason:
        raise InvalidRequest("a rejection needs a reason")
    actor = form.get("actor", "").strip() or None
    if actor is not None and len(actor) > MAX_ACTOR_CHARS:
        raise InvalidRequest(f"the name you vote for must be at most {MAX_ACTOR_CHARS} characters")
    return reason, actor
