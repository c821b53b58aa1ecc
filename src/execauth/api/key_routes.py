"""API key handlers shared by the console and the operator surface.

Both expose issue / list / rotate / revoke; they differ only in how the
organization and the acting principal are found, which ``Scope`` abstracts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from execauth.api.pagination import integer, optional_timestamp
from execauth.api.views import key_view, ts
from execauth.api.wire import decode_as, json_response, read_json_body
from execauth.usecases.control_plane import DEFAULT_ROTATION_GRACE, MAX_ROTATION_GRACE, ControlPlane

Handler = Callable[[Request], Awaitable[Response]]
# (org_id, actor) for a request that already passed authentication.
Scope = Callable[[Request], Awaitable[tuple[str, str]]]


class NewKey(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    role: str = "execute"
    surfaces: list[str] | None = None
    expires_at: str | None = None


class KeyRotation(msgspec.Struct, forbid_unknown_fields=True):
    grace_seconds: int = int(DEFAULT_ROTATION_GRACE.total_seconds())


class KeyHandlers:
    def __init__(self, plane: ControlPlane, scope: Scope, max_body_bytes: int) -> None:
        self._plane = plane
        self._scope = scope
        self._max_body = max_body_bytes

    async def issue(self, request: Request) -> Response:
        org_id, actor = await self._scope(request)
        spec = decode_as(await read_json_body(request, self._max_body), NewKey)
        expires_at = optional_timestamp(spec.expires_at or None, "expires_at")
        key, secret = await self._plane.issue_key(
            org_id,
            name=spec.name,
            role=spec.role,
            surfaces=spec.surfaces,
            expires_at=expires_at,
            actor=actor,
        )
        return json_response({**key_view(key), "api_key": secret}, 201)

    async def list(self, request: Request) -> Response:
        org_id, _ = await self._scope(request)
        keys = await self._plane.list_keys(org_id)
        return json_response({"keys": [key_view(k) for k in keys]})

    async def rotate(self, request: Request) -> Response:
        org_id, actor = await self._scope(request)
        has_body = request.headers.get("content-length", "0") != "0"
        body = await read_json_body(request, self._max_body) if has_body else {}
        spec = decode_as(body, KeyRotation)
        grace_seconds = integer(
            spec.grace_seconds,
            "grace_seconds",
            minimum=0,
            maximum=int(MAX_ROTATION_GRACE.total_seconds()),
        )
        key, secret = await self._plane.rotate_key(
            org_id,
            request.path_params["key_id"],
            grace=timedelta(seconds=grace_seconds),
            actor=actor,
        )
        return json_response(
            {
                **key_view(key),
                "api_key": secret,
                "previous_valid_until": ts(key.previous_valid_until),
            }
        )

    async def revoke(self, request: Request) -> Response:
        org_id, actor = await self._scope(request)
        await self._plane.revoke_key(org_id, request.path_params["key_id"], actor=actor)
        return Response(status_code=204)
