"""The ASGI application factory: one app, three surfaces (docs/api.md, "Surfaces")."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

import anyio
import anyio.to_thread
from sqlalchemy.exc import SQLAlchemyError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import BaseRoute

from execauth.api.admission import OperatorAdmission, admission_limits, guard_heavy_routes
from execauth.api.console import console_routes
from execauth.api.errors import (
    handle_database_error,
    handle_execauth_error,
    handle_http_exception,
    handle_unexpected,
)
from execauth.api.gateway import gateway_routes
from execauth.api.ledger_routes import ledger_routes
from execauth.api.operator import operator_routes
from execauth.api.origin_check import IssuerOriginCheck
from execauth.errors import ExecauthError
from execauth.observability import tracing
from execauth.serving.runtime import Runtime
from execauth.serving.shared_generation import SharedGeneration
from execauth.usecases.approval_sweep import ApprovalSweep, run_sweep
from execauth.usecases.execute import Clock, ExecutionService, utc_now
from execauth.usecases.wiring import build_use_cases
from execauth.web import web_routes

log = logging.getLogger("execauth")
SURFACES = ("gateway", "console", "operator")


def create_app(
    runtime: Runtime,
    *,
    surfaces: Sequence[str] = SURFACES,
    clock: Clock = utc_now,
    shared_generation: SharedGeneration | None = None,
) -> Starlette:
    """Build the app over ``runtime``; ``surfaces`` selects which APIs this listener serves.

    ``shared_generation`` (``serve --workers N``) tells sibling workers about key and
    policy changes at once instead of after their caches' ttl.
    """
    cases = build_use_cases(runtime, clock=clock, shared_generation=shared_generation)
    service = cases.execute
    routes: list[BaseRoute] = []
    if "gateway" in surfaces:
        routes += gateway_routes(
            runtime, service, approvals=cases.approvals, consumption=cases.consumption
        )
    if "console" in surfaces:
        routes += console_routes(
            runtime,
            plane=cases.control,
            usage=cases.usage,
            replays=cases.replay,
            export=cases.export,
            subscriptions=cases.subscriptions,
            clock=cases.clock,
        )
    if "operator" in surfaces:
        routes += operator_routes(
            runtime,
            service,
            plane=cases.control,
            usage=cases.usage,
            replays=cases.replay,
            approvals=cases.approvals,
            subscriptions=cases.subscriptions,
            clock=cases.clock,
        )
    routes += ledger_routes(runtime, service, surfaces)
    routes += web_routes(runtime, cases, surfaces)
    # Replays, exports and listings are bounded per org and per process (docs/operations.md).
    routes = guard_heavy_routes(routes, OperatorAdmission(service, admission_limits(runtime)))
    # Checked now: a bad OTEL_* value stops serve before it listens (docs/observability.md).
    tracing_middleware = tracing.middleware()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Here, in the serving process: each uvicorn worker gets its own span exporter thread.
        tracing.start()
        runtime.start()
        # Sequencing and streaming run where the records are committed: here, or in the
        # writer process of ``serve --workers N`` (serving/write_path.py).
        runtime.write_path.start_log_keeping()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_refresh_keys, runtime, service)
            if runtime.settings.approval_sweep_interval_seconds > 0:
                # Every serving process sweeps; the settle path issues each receipt once.
                sweep = ApprovalSweep(
                    service.approvals,
                    service.issue_outcome,
                    clock=service.clock,
                    batch=runtime.settings.approval_sweep_batch,
                )
                tasks.start_soon(run_sweep, sweep, runtime.settings.approval_sweep_interval_seconds)
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()
        service.rate_limiter.close()
        await anyio.to_thread.run_sync(runtime.write_path.stop_log_keeping)
        await anyio.to_thread.run_sync(runtime.stop)
        await anyio.to_thread.run_sync(tracing.stop)  # flush the last spans

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[
            *tracing_middleware,
            Middleware(IssuerOriginCheck, issuer=runtime.settings.issuer),
        ],
        exception_handlers={
            ExecauthError: handle_execauth_error,
            HTTPException: handle_http_exception,
            SQLAlchemyError: handle_database_error,
            Exception: handle_unexpected,
        },
    )
    app.state.service = service
    app.state.sequencer = runtime.write_path.sequencer
    return app


async def _refresh_keys(runtime: Runtime, service: ExecutionService) -> None:
    """Follow key rotation and revocation done by other processes (CLI, other instances),
    and rotate the keys when the schedule says so (``Runtime.follow_signing_keys``)."""
    interval = runtime.settings.refresh_interval_seconds
    while True:
        await anyio.sleep(interval)
        try:
            await anyio.to_thread.run_sync(runtime.follow_signing_keys, service.clock())
        except Exception:
            log.exception("refreshing or rotating signing keys failed")
