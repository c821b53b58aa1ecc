"""The console (control plane) API under ``/console/v1``, for the platform administrator.

Authenticated by the bootstrap admin token (DESIGN.md §3). The organization's
own admin keys and the operator surface come with the tenancy issue.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import anyio.to_thread
import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from execauth.api.wire import json_response, read_json_body
from execauth.errors import InvalidRequest, NotFound, PayloadTooLarge, Unauthorized
from execauth.policy.decision import PolicyRef
from execauth.policy.document import parse_policy_document
from execauth.policy.engine import compile_policy
from execauth.service import ExecutionService
from execauth.store.control import StoredPolicy
from execauth.tenancy.api_keys import (
    ROLES,
    ApiKey,
    generate_secret,
    hash_secret,
    new_key_id,
    validate_surface_patterns,
)
from execauth.tenancy.orgs import ORG_NAME_MAX, PLANS, WIRE_PROFILES, Org, new_org_id
from execauth.wire_time import format_timestamp, parse_timestamp

Handler = Callable[[Request], Awaitable[Response]]
MAX_POLICY_BYTES = 256 * 1024


class NewOrg(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    plan: str = "free"
    wire_profile: str = "a"


class NewKey(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    role: str = "execute"
    surfaces: list[str] | None = None
    expires_at: str | None = None


T = TypeVar("T")


def _decode(body: Any, kind: type[T]) -> T:
    try:
        return msgspec.convert(body, kind)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(str(exc)) from exc


def org_view(org: Org) -> dict[str, Any]:
    return {
        "org_id": org.org_id,
        "name": org.name,
        "plan": org.plan,
        "wire_profile": org.wire_profile,
        "created_at": format_timestamp(org.created_at),
        "disabled_at": format_timestamp(org.disabled_at) if org.disabled_at else None,
    }


def key_view(key: ApiKey) -> dict[str, Any]:
    def ts(value: datetime | None) -> str | None:
        return format_timestamp(value) if value is not None else None

    return {
        "key_id": key.key_id,
        "org_id": key.org_id,
        "name": key.name,
        "role": key.role,
        "surfaces": list(key.surfaces),
        "created_at": ts(key.created_at),
        "expires_at": ts(key.expires_at),
        "revoked_at": ts(key.revoked_at),
        "last_used_at": ts(key.last_used_at),
    }


def policy_view(policy: StoredPolicy) -> dict[str, Any]:
    return {
        "policy_id": policy.policy_id,
        "version": policy.version,
        "policy_hash": policy.policy_hash,
        "created_at": format_timestamp(policy.created_at),
        "document": policy.document,
    }


def console_routes(service: ExecutionService) -> list[BaseRoute]:
    runtime = service.runtime
    control = runtime.control

    def admin_only(handler: Handler) -> Handler:
        async def guarded(request: Request) -> Response:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not token or not runtime.admin.check(token.strip()):
                raise Unauthorized("the console needs Authorization: Bearer <admin token>")
            return await handler(request)

        return guarded

    async def existing_org(request: Request) -> Org:
        org = await anyio.to_thread.run_sync(control.get_org, request.path_params["org_id"])
        if org is None:
            raise NotFound("no such organization")
        return org

    async def create_org(request: Request) -> Response:
        spec = _decode(await read_json_body(request, runtime.settings.max_body_bytes), NewOrg)
        if not spec.name.strip() or len(spec.name) > ORG_NAME_MAX:
            raise InvalidRequest(f"name must be 1 to {ORG_NAME_MAX} characters")
        if spec.plan not in PLANS:
            raise InvalidRequest(f"unknown plan {spec.plan!r} (known: {', '.join(PLANS)})")
        if spec.wire_profile not in WIRE_PROFILES:
            raise InvalidRequest("wire_profile must be 'a' or 'b'")
        org = Org(new_org_id(), spec.name, spec.plan, spec.wire_profile, service.clock())
        await anyio.to_thread.run_sync(control.create_org, org)
        return json_response(org_view(org), 201)

    async def list_orgs(request: Request) -> Response:
        orgs = await anyio.to_thread.run_sync(control.list_orgs)
        return json_response({"orgs": [org_view(o) for o in orgs]})

    async def show_org(request: Request) -> Response:
        return json_response(org_view(await existing_org(request)))

    async def issue_key(request: Request) -> Response:
        org = await existing_org(request)
        spec = _decode(await read_json_body(request, runtime.settings.max_body_bytes), NewKey)
        if spec.role not in ROLES:
            raise InvalidRequest(f"role must be one of {', '.join(ROLES)}")
        if not spec.name.strip() or len(spec.name) > 256:
            raise InvalidRequest("name must be 1 to 256 characters")
        try:
            surfaces = validate_surface_patterns(spec.surfaces)
            expires_at = parse_timestamp(spec.expires_at) if spec.expires_at else None
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from exc
        now = service.clock()
        if expires_at is not None and expires_at <= now:
            raise InvalidRequest("expires_at must be in the future")
        secret = generate_secret()
        key = ApiKey(
            new_key_id(), org.org_id, spec.name, spec.role, surfaces, now, expires_at, None
        )
        await anyio.to_thread.run_sync(
            control.insert_api_key, key, hash_secret(runtime.secret, secret)
        )
        return json_response({**key_view(key), "api_key": secret}, 201)

    async def list_keys(request: Request) -> Response:
        org = await existing_org(request)
        keys = await anyio.to_thread.run_sync(control.list_api_keys, org.org_id)
        return json_response({"keys": [key_view(k) for k in keys]})

    async def revoke_key(request: Request) -> Response:
        org = await existing_org(request)
        revoked = await anyio.to_thread.run_sync(
            control.revoke_api_key, org.org_id, request.path_params["key_id"], service.clock()
        )
        if not revoked:
            raise NotFound("no such key in this organization")
        service.credentials.invalidate()
        return Response(status_code=204)

    async def publish_policy(request: Request) -> Response:
        org = await existing_org(request)
        policy_id = request.path_params["policy_id"]
        raw = await request.body()
        if len(raw) > MAX_POLICY_BYTES:
            raise PayloadTooLarge(f"policy documents are limited to {MAX_POLICY_BYTES} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidRequest("policy document must be UTF-8 text") from exc
        document = parse_policy_document(text, policy_id=policy_id, source_name=policy_id)
        compile_policy(document, PolicyRef(policy_id, 0, document.policy_hash))
        version = await anyio.to_thread.run_sync(
            control.publish_policy,
            org.org_id,
            policy_id,
            document.data,
            text,
            document.policy_hash,
            service.clock(),
        )
        service.policies.invalidate(org.org_id)
        return json_response(
            {"policy_id": policy_id, "version": version, "policy_hash": document.policy_hash}, 201
        )

    async def list_policies(request: Request) -> Response:
        org = await existing_org(request)
        stored = await anyio.to_thread.run_sync(control.latest_policies, org.org_id)
        return json_response({"policies": [policy_view(p) for p in stored]})

    async def show_policy(request: Request) -> Response:
        org = await existing_org(request)
        version = request.query_params.get("version")
        if version is not None and not version.isdigit():
            raise InvalidRequest("version must be a positive integer")
        stored = await anyio.to_thread.run_sync(
            control.get_policy,
            org.org_id,
            request.path_params["policy_id"],
            int(version) if version else None,
        )
        if stored is None:
            raise NotFound("no such policy (or version)")
        return json_response(policy_view(stored))

    prefix = "/console/v1/orgs"
    return [
        Route(prefix, admin_only(create_org), methods=["POST"]),
        Route(prefix, admin_only(list_orgs), methods=["GET"]),
        Route(prefix + "/{org_id}", admin_only(show_org), methods=["GET"]),
        Route(prefix + "/{org_id}/keys", admin_only(issue_key), methods=["POST"]),
        Route(prefix + "/{org_id}/keys", admin_only(list_keys), methods=["GET"]),
        Route(prefix + "/{org_id}/keys/{key_id}", admin_only(revoke_key), methods=["DELETE"]),
        Route(prefix + "/{org_id}/policies", admin_only(list_policies), methods=["GET"]),
        Route(
            prefix + "/{org_id}/policies/{policy_id}", admin_only(publish_policy), methods=["PUT"]
        ),
        Route(prefix + "/{org_id}/policies/{policy_id}", admin_only(show_policy), methods=["GET"]),
    ]
