"""Console pages that change things: API keys, and policies (diff, impact preview, publish).

Admins may change; auditors see the same pages read-only. Every change goes
through ``ControlPlane`` (validated and audited there) and impact previews
through ``ReplayService.impact``, exactly as the JSON API does.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from datetime import datetime, timedelta
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from execauth.api.pagination import MAX_INT32, integer, timestamp
from execauth.api.views import key_view
from execauth.errors import ExecauthError, InvalidRequest, NotFound
from execauth.store.control import ControlStore, StoredPolicy
from execauth.tenancy.api_keys import ROLES
from execauth.usecases.control_plane import DEFAULT_ROTATION_GRACE, MAX_ROTATION_GRACE, ControlPlane
from execauth.usecases.replay import ReplayService
from execauth.web.auth import WRITERS, ConsoleAuth, Operator
from execauth.web.rendering import Renderer, page_route

MAX_VERSIONS_SHOWN = 50
GRACE_CHOICES = (("0", "none"), ("3600", "1 hour"), ("86400", "24 hours"), ("604800", "7 days"))
POLICY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def manage_pages(
    control: ControlStore,
    plane: ControlPlane,
    replays: ReplayService,
    *,
    renderer: Renderer,
    auth: ConsoleAuth,
) -> list[Route]:
    """``control`` for reading policies; every change goes through ``plane``."""

    def render(
        template: str, request: Request, operator: Operator, status: int = 200, **context: Any
    ) -> Response:
        context = {"operator": operator, "path": request.url.path, **context}
        return renderer.page(template, context, status)

    # --- API keys ---------------------------------------------------------
    async def keys_page(
        request: Request, operator: Operator, status: int = 200, **extra: Any
    ) -> Response:
        keys = [key_view(k) for k in await plane.list_keys(operator.org.org_id)]
        # The notice after a revocation names the key only if it is revoked indeed.
        revoked_id = request.query_params.get("revoked")
        revoked = next((k for k in keys if k["key_id"] == revoked_id and k["revoked_at"]), None)
        return render(
            "keys.html",
            request,
            operator,
            status,
            keys=keys,
            roles=ROLES,
            revoked=revoked,
            **{"error": None, **extra},
        )

    async def one_key(operator: Operator, key_id: str) -> dict[str, Any]:
        """One key of the signed-in org, still usable (a revoked key has no actions left)."""
        keys = await plane.list_keys(operator.org.org_id)
        found = next((k for k in keys if k.key_id == key_id), None)
        if found is None:
            raise NotFound("no such key in this organization")
        if found.revoked_at is not None:
            raise InvalidRequest("this key is revoked already")
        return key_view(found)

    @auth.page(WRITERS)
    async def rotate_form(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        key = await one_key(operator, request.path_params["key_id"])
        return render("key_rotate.html", request, operator, key=key, grace_choices=GRACE_CHOICES,
                      default_grace=str(int(DEFAULT_ROTATION_GRACE.total_seconds())))  # fmt: skip

    @auth.page(WRITERS)
    async def revoke_form(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        """Revoking cannot be undone: it is asked for on a page of its own, then confirmed."""
        key = await one_key(operator, request.path_params["key_id"])
        return render("key_revoke.html", request, operator, key=key)

    @auth.page()
    async def keys(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        return await keys_page(request, operator)

    @auth.page(WRITERS)
    async def issue_key(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        try:
            key, secret = await plane.issue_key(
                operator.org.org_id,
                name=form.get("name", ""),
                role=form.get("role", "execute"),
                surfaces=_surface_list(form.get("surfaces", "")),
                expires_at=_form_time(form.get("expires_at", "")),
                actor=operator.actor,
            )
        except InvalidRequest as exc:
            return await keys_page(request, operator, exc.status, error=exc.message)
        return render("key_secret.html", request, operator, key=key_view(key), secret=secret,
                      action="issued")  # fmt: skip

    @auth.page(WRITERS)
    async def rotate_key(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        # The API's one parameter parser: ASCII digits in range, never int()'s "²" or 2^63.
        grace = integer(
            form.get("grace_seconds", ""),
            "grace_seconds",
            minimum=0,
            maximum=int(MAX_ROTATION_GRACE.total_seconds()),
        )
        key, secret = await plane.rotate_key(
            operator.org.org_id,
            request.path_params["key_id"],
            grace=timedelta(seconds=grace),
            actor=operator.actor,
        )
        return render("key_secret.html", request, operator, key=key_view(key), secret=secret,
                      action="rotated")  # fmt: skip

    @auth.page(WRITERS)
    async def revoke_key(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        if form.get("confirm") != "revoke":
            raise InvalidRequest("revoking needs confirmation: use the key's Revoke… page")
        await plane.revoke_key(
            operator.org.org_id, request.path_params["key_id"], actor=operator.actor
        )
        return RedirectResponse("/console/keys?revoked=" + request.path_params["key_id"], 303)

    # --- policies ---------------------------------------------------------
    @auth.page()
    async def policies(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        latest = await anyio.to_thread.run_sync(control.latest_policies, operator.org.org_id)
        return render("policies.html", request, operator, policies=latest, draft=None, error=None)

    @auth.page()
    async def policy(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        policy_id = request.path_params["policy_id"]
        versions = await anyio.to_thread.run_sync(
            _versions, control, operator.org.org_id, policy_id
        )
        if not versions:
            raise NotFound("no such policy in this organization")
        shown = _version_param(request, "version") or versions[0].version
        current = next((v for v in versions if v.version == shown), None)
        if current is None:
            raise NotFound(f"policy {policy_id} has no version {shown} (or it is too old to list)")
        return render("policy.html", request, operator, policy_id=policy_id, versions=versions,
                      current=current, published=request.query_params.get("published"))  # fmt: skip

    @auth.page()
    async def diff(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        policy_id = request.path_params["policy_id"]
        old_v, new_v = _version_param(request, "from"), _version_param(request, "to")
        if old_v is None or new_v is None:
            raise InvalidRequest("choose two versions (from and to)")
        old, new = await anyio.to_thread.run_sync(
            lambda: (
                control.get_policy(operator.org.org_id, policy_id, old_v),
                control.get_policy(operator.org.org_id, policy_id, new_v),
            )
        )
        if old is None or new is None:
            raise NotFound("no such policy version")
        return render("diff.html", request, operator, policy_id=policy_id, old=old, new=new,
                      lines=source_diff(old, new))  # fmt: skip

    @auth.page(WRITERS)
    async def preview(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        """Impact analysis of a draft against this org's history; publishing comes after."""
        policy_id, source = form.get("policy_id", "").strip(), _text_field(form, "source")
        try:
            if not POLICY_ID.match(policy_id):
                raise InvalidRequest("policy id: 1 to 128 letters, digits, '.', '_' or '-'")
            report = await replays.impact(operator.org.org_id, source, policy_id, None, None)
        except ExecauthError as exc:
            latest = await anyio.to_thread.run_sync(control.latest_policies, operator.org.org_id)
            draft = {"policy_id": policy_id, "source": source}
            return render("policies.html", request, operator, exc.status, policies=latest,
                          draft=draft, error=exc.message)  # fmt: skip
        return render("impact.html", request, operator, policy_id=policy_id, source=source,
                      report=report, previewed=_text_digest(source))  # fmt: skip

    @auth.page(WRITERS)
    async def publish(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        policy_id, source = form.get("policy_id", ""), _text_field(form, "source")
        if form.get("previewed") != _text_digest(source):
            raise InvalidRequest("this draft was not the one previewed; preview it again")
        version, _ = await plane.publish_policy(
            operator.org.org_id, policy_id, source, actor=operator.actor
        )
        return RedirectResponse(f"/console/policies/{policy_id}?published={version}", 303)

    return [
        page_route("/console/keys", keys, "GET"),
        page_route("/console/keys", issue_key, "POST"),
        page_route("/console/keys/{key_id}/rotate", rotate_form, "GET"),
        page_route("/console/keys/{key_id}/rotate", rotate_key, "POST"),
        page_route("/console/keys/{key_id}/revoke", revoke_form, "GET"),
        page_route("/console/keys/{key_id}/revoke", revoke_key, "POST"),
        page_route("/console/policies", policies, "GET"),
        page_route("/console/policies/preview", preview, "POST"),
        page_route("/console/policies/publish", publish, "POST"),
        page_route("/console/policies/{policy_id}", policy, "GET"),
        page_route("/console/policies/{policy_id}/diff", diff, "GET"),
    ]


def source_diff(old: StoredPolicy, new: StoredPolicy) -> list[tuple[str, str]]:
    """Unified diff of two versions' sources as (css class, line) pairs."""
    lines = difflib.unified_diff(
        old.source.splitlines(),
        new.source.splitlines(),
        fromfile=f"{old.policy_id} v{old.version}",
        tofile=f"{new.policy_id} v{new.version}",
        lineterm="",
    )
    kinds = {"+": "add", "-": "del", "@": "hunk"}
    out = []
    for line in lines:
        kind = "file" if line.startswith(("+++", "---")) else kinds.get(line[:1], "ctx")
        out.append((kind, line))
    return out


def _versions(control: ControlStore, org_id: str, policy_id: str) -> list[StoredPolicy]:
    """The newest versions of one policy, newest first (versions are 1..latest, never deleted)."""
    latest = control.get_policy(org_id, policy_id, None)
    if latest is None:
        return []
    found = [latest]
    for version in range(latest.version - 1, max(0, latest.version - MAX_VERSIONS_SHOWN), -1):
        stored = control.get_policy(org_id, policy_id, version)
        if stored is not None:
            found.append(stored)
    return found


def _version_param(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    return integer(raw, name, minimum=1, maximum=MAX_INT32)  # versions are INTEGER columns


def _surface_list(text: str) -> list[str] | None:
    patterns = [p for p in re.split(r"[,\s]+", text) if p]
    return patterns or None


def _form_time(text: str) -> datetime | None:
    """An optional time from the form: RFC 3339, or ``datetime-local`` minutes read as UTC."""
    text = text.strip()
    if not text:
        return None
    if re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d", text):
        text += ":00Z"
    return timestamp(text, "expires at")  # the API's parser: the range's edges are 400 too


def _text_field(form: dict[str, str], name: str) -> str:
    """A <textarea>'s text: browsers submit its line breaks as CRLF (HTML §4.10.11)."""
    return form.get(name, "").replace("\r\n", "\n")


def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
