"""Replay and impact-analysis handlers, shared by the operator surface and the console."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from execauth.api.key_routes import Scope
from execauth.api.pagination import optional_timestamp
from execauth.api.wire import decode_as, json_response, read_json_body
from execauth.errors import InvalidRequest
from execauth.usecases.replay import ReplayService

MAX_DRAFT_BYTES = 256 * 1024


class ReplayRange(msgspec.Struct, forbid_unknown_fields=True):
    since: str | None = None
    until: str | None = None
    # A draft document, as publishing takes it: YAML or JSON text, or the JSON object.
    policy: str | dict[str, Any] | None = None
    policy_id: str | None = None  # which policy the draft would replace


class ReplayHandlers:
    def __init__(self, replays: ReplayService, scope: Scope) -> None:
        self._replays = replays
        self._scope = scope

    async def one(self, request: Request) -> Response:
        """Re-evaluate one stored execution; the replay joins its lineage."""
        org_id, actor = await self._scope(request)
        result = await self._replays.replay_execution(
            org_id, request.path_params["execution_id"], actor
        )
        return json_response(result)

    async def range(self, request: Request) -> Response:
        """Replay a time range (mismatches are bugs), or with ``policy``: a draft's impact."""
        org_id, _ = await self._scope(request)
        spec = decode_as(await read_json_body(request, MAX_DRAFT_BYTES), ReplayRange)
        since = optional_timestamp(spec.since or None, "since")
        until = optional_timestamp(spec.until or None, "until")
        if spec.policy is None:
            return json_response((await self._replays.replay_range(org_id, since, until)).view())
        if not spec.policy_id:
            raise InvalidRequest("policy_id names the policy the draft would replace")
        report = await self._replays.impact(org_id, spec.policy, spec.policy_id, since, until)
        return json_response(report)
