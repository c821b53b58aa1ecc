"""Console pages: sign-in, the execution timeline and one execution, usage, the audit trail.

Each handler calls the same core the JSON operator API calls (``executions_page``,
``ReplayService`` (its ``explain`` too), ``UsageQueries``, ``audit_page``, ``verify_receipt``) and
renders its result; nothing here decides, counts or queries on its own.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from execauth.api.history import audit_page, executions_page
from execauth.api.pagination import month_param
from execauth.api.views import execution_detail
from execauth.errors import ExecauthError, InvalidRequest, NotFound
from execauth.keyring import key_list_document
from execauth.serving.runtime import Runtime
from execauth.tenancy.quota import month_period
from execauth.tenancy.usage import DECISIONS
from execauth.usecases.execute import Clock
from execauth.usecases.replay import ReplayService
from execauth.usecases.usage import UsageQueries
from execauth.verify import parse_key_list, verify_receipt
from execauth.web.auth import LOGIN_PATH, WRITERS, ConsoleAuth, Operator
from execauth.web.charts import (
    DEFAULT_WINDOW,
    WINDOWS,
    Bucket,
    Series,
    buckets,
    decision_series,
    usage_chart,
)
from execauth.web.rendering import Renderer, page_route
from execauth.web.session import (
    LOGIN_CSRF_COOKIE,
    check_csrf,
    clear_session_cookie,
    new_csrf_token,
    read_form,
    set_login_csrf,
    set_session_cookie,
)

TIMELINE_FILTERS = ("surface", "decision", "actor", "since", "until")
# <input type="datetime-local"> sends minutes without a zone; the form says it is UTC.
_LOCAL_MINUTES = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d$")


def console_pages(
    runtime: Runtime,
    replays: ReplayService,
    usage: UsageQueries,
    clock: Clock,
    *,
    renderer: Renderer,
    auth: ConsoleAuth,
) -> list[Route]:
    """``runtime`` for the history, the logs and the key list these pages read."""

    def render(
        template: str, request: Request, operator: Operator | None, **context: Any
    ) -> Response:
        return renderer.page(template, {"operator": operator, "path": request.url.path, **context})

    # --- sign-in ----------------------------------------------------------
    async def login_form(request: Request) -> Response:
        if await auth.operator(request) is not None:
            return RedirectResponse("/console/executions", 303)
        return _login_page(request, None, 200)

    def _login_page(request: Request, error: str | None, status: int) -> Response:
        token = new_csrf_token()
        context = {"operator": None, "path": LOGIN_PATH, "error": error, "csrf": token}
        response = renderer.page("login.html", context, status)
        set_login_csrf(response, request, token)
        return response

    async def login(request: Request) -> Response:
        form = await read_form(request)
        check_csrf(request.cookies.get(LOGIN_CSRF_COOKIE), form)
        try:
            session = await auth.sign_in(form.get("api_key", ""))
        except ExecauthError as exc:
            return _login_page(request, exc.message, exc.status)
        response = RedirectResponse("/console/executions", 303)
        set_session_cookie(response, request, session)
        response.delete_cookie(LOGIN_CSRF_COOKIE, path="/console/")
        return response

    @auth.page()
    async def logout(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        await auth.sign_out(operator)
        response = RedirectResponse(LOGIN_PATH, 303)
        clear_session_cookie(response, request)
        return response

    async def home(request: Request) -> Response:
        return RedirectResponse("/console/executions", 303)

    # --- timeline ---------------------------------------------------------
    async def timeline_context(request: Request, operator: Operator) -> dict[str, Any]:
        page = await executions_page(runtime, request, operator.org.org_id)
        month = month_period(clock())
        report = await usage.org_usage(operator.org, month)
        filters = {name: request.query_params.get(name, "") for name in TIMELINE_FILTERS}
        query = {k: v for k, v in filters.items() if v}
        older = (
            "/console/executions?" + urlencode({**query, "cursor": page["next_cursor"]})
            if page["next_cursor"]
            else None
        )
        return {
            "executions": page["executions"],
            "older": older,
            "filters": filters,
            "decisions": DECISIONS,
            "counts": report["executes"]["by_decision"],
            "month": month,
            "live": "cursor" not in request.query_params,
            "live_src": "/console/timeline?" + urlencode(query),
        }

    @auth.page()
    async def executions(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        cleaned = _clean_filters(request)
        if cleaned is not None:
            return RedirectResponse("/console/executions?" + cleaned, 303)
        context = await timeline_context(request, operator)
        window = request.query_params.get("window", DEFAULT_WINDOW)
        if window not in WINDOWS:
            raise InvalidRequest(f"window must be one of {', '.join(WINDOWS)}")
        series = await anyio.to_thread.run_sync(over_time, operator.org.org_id, window)
        return render("executions.html", request, operator, series=series, window=window,
                      windows=WINDOWS, **context)  # fmt: skip

    def over_time(org_id: str, window: str) -> list[Series]:
        """Executes per hour (or day) of the window, from the usage report's grouped count.

        Not part of the live partial: the few-second poll would repeat these queries.
        """
        periods = buckets(clock(), window)
        filled = [
            Bucket(start, end, runtime.executions.usage_rows(org_id, start, end))
            for start, end in periods
        ]
        return decision_series(filled, window)

    @auth.page()
    async def timeline(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        """The live part of the timeline, fetched again every few seconds by console.js."""
        context = await timeline_context(request, operator)
        return render("_timeline.html", request, operator, **context)

    # --- one execution ----------------------------------------------------
    @auth.page()
    async def execution(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        org_id, execution_id = operator.org.org_id, request.path_params["execution_id"]
        record = await anyio.to_thread.run_sync(runtime.executions.get, org_id, execution_id)
        if record is None:
            raise NotFound("no such execution in this organization")
        lineage = await anyio.to_thread.run_sync(runtime.executions.lineage, org_id, execution_id)
        detail = execution_detail(record, lineage)
        now = clock()
        keys, issuer = parse_key_list(
            key_list_document(runtime.keyring.records, runtime.settings.issuer)
        )
        verdict = verify_receipt(detail["receipt"], keys, now=now, issuer=issuer)
        position = await anyio.to_thread.run_sync(runtime.logs.position, org_id, execution_id)
        checkpoint = await anyio.to_thread.run_sync(runtime.logs.latest_checkpoint, org_id)
        replays_done = [e for e in detail["lineage"] if e["kind"] == "replay"]
        why, why_error = await anyio.to_thread.run_sync(replays.explain, record)
        return render(
            "execution.html",
            request,
            operator,
            execution=detail,
            verdict=verdict,
            position=position,
            tree_size=checkpoint.tree_size if checkpoint is not None else None,
            last_replay=replays_done[-1] if replays_done else None,
            just_replayed=request.query_params.get("replayed") == "1",
            why=why,
            why_error=why_error,
        )

    @auth.page(WRITERS)  # a replay writes the lineage: auditors only read
    async def replay(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        execution_id = request.path_params["execution_id"]
        await replays.replay_execution(operator.org.org_id, execution_id, operator.actor)
        return RedirectResponse(f"/console/executions/{execution_id}?replayed=1#replay", 303)

    # --- usage and audit --------------------------------------------------
    @auth.page()
    async def usage_page(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        report = await usage.org_usage(operator.org, month_param(request))
        return render("usage.html", request, operator, report=report, chart=usage_chart(report))

    @auth.page()
    async def audit(request: Request, operator: Operator, form: dict[str, str]) -> Response:
        page = await audit_page(runtime, request, operator.org.org_id)
        older = (
            "/console/audit?" + urlencode({"cursor": page["next_cursor"]})
            if page["next_cursor"]
            else None
        )
        return render("audit.html", request, operator, events=page["events"], older=older)

    html = renderer.html_endpoint
    return [
        page_route("/console/", html(home), "GET"),
        page_route(LOGIN_PATH, html(login_form), "GET"),
        page_route(LOGIN_PATH, html(login), "POST"),
        page_route("/console/logout", logout, "POST"),
        page_route("/console/executions", executions, "GET"),
        page_route("/console/timeline", timeline, "GET"),
        page_route("/console/executions/{execution_id}", execution, "GET"),
        page_route("/console/executions/{execution_id}/replay", replay, "POST"),
        page_route("/console/usage", usage_page, "GET"),
        page_route("/console/audit", audit, "GET"),
    ]


def _clean_filters(request: Request) -> str | None:
    """A query without the form's blank fields (and with UTC zones), or ``None`` if clean."""
    params = list(request.query_params.multi_items())
    cleaned = []
    for name, value in params:
        if not value:
            continue
        if name in ("since", "until") and _LOCAL_MINUTES.match(value):
            value += ":00Z"
        cleaned.append((name, value))
    return None if cleaned == params else urlencode(cleaned)
