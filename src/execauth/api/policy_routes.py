"""Policy handlers shared by the console and the operator surface: list, show, publish.

The console (platform admin, the org in the path) and the operator surface (an
organization's own ``admin`` key publishes, ``auditor`` keys read) differ only in how
the organization and the acting principal are found, which ``Scope`` abstracts; both
publish through ``ControlPlane.publish_policy``, so validation and audit happen once.
"""

from __future__ import annotations

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from execauth.api.key_routes import Scope
from execauth.api.pagination import MAX_INT32, query_int
from execauth.api.views import policy_view
from execauth.api.wire import json_response
from execauth.errors import InvalidRequest, NotFound, PayloadTooLarge
from execauth.policy.document import MAX_DOCUMENT_BYTES
from execauth.store.control import ControlStore
from execauth.usecases.control_plane import ControlPlane

MAX_POLICY_BYTES = MAX_DOCUMENT_BYTES  # what parse_policy_document accepts, and no more


class PolicyHandlers:
    def __init__(self, plane: ControlPlane, control: ControlStore, scope: Scope) -> None:
        self._plane = plane
        self._control = control
        self._scope = scope

    async def list(self, request: Request) -> Response:
        """The latest version of each of the organization's policies."""
        org_id, _ = await self._scope(request)
        stored = await anyio.to_thread.run_sync(self._control.latest_policies, org_id)
        return json_response({"policies": [policy_view(p) for p in stored]})

    async def show(self, request: Request) -> Response:
        """One version (``?version=N``, default the latest), with its document and source."""
        org_id, _ = await self._scope(request)
        version = query_int(request, "version", minimum=1, maximum=MAX_INT32)
        policy_id = request.path_params["policy_id"]
        stored = await anyio.to_thread.run_sync(
            self._control.get_policy, org_id, policy_id, version
        )
        if stored is None:
            raise NotFound("no such policy (or version)")
        return json_response(policy_view(stored))

    async def publish(self, request: Request) -> Response:
        """Validate the body (the raw YAML or JSON document) and store the next version."""
        org_id, actor = await self._scope(request)
        text = await read_policy_source(request)
        policy_id = request.path_params["policy_id"]
        version, policy_hash = await self._plane.publish_policy(
            org_id, policy_id, text, actor=actor
        )
        return json_response(
            {"policy_id": policy_id, "version": version, "policy_hash": policy_hash}, 201
        )


async def read_policy_source(request: Request) -> str:
    """The body as UTF-8 text, read no further than ``MAX_POLICY_BYTES`` (else 413).

    A declared Content-Length over the limit is refused before reading anything; a
    streamed body is refused at the first chunk past it, so an upload of any size
    costs at most the limit in memory.
    """
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared[:20]) > MAX_POLICY_BYTES:
        raise PayloadTooLarge(f"policy documents are limited to {MAX_POLICY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_POLICY_BYTES:
            raise PayloadTooLarge(f"policy documents are limited to {MAX_POLICY_BYTES} bytes")
        chunks.append(chunk)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest("policy document must be UTF-8 text") from exc
