"""``execauth serve``: migrate, make sure a signing key and an admin credential exist, serve."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer
import uvicorn
from rich.console import Console
from rich.panel import Panel
from starlette.applications import Starlette
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

from execauth.api.app import SURFACES, create_app
from execauth.api.server_limits import LimitedConfig, ServerLimits
from execauth.config import Settings, serving_processes
from execauth.observability.logs import logging_config, name_process, setup_logging
from execauth.observability.metrics import MULTIPROCESS_DIR_VARIABLE
from execauth.serving.runtime import bootstrap, freeze_startup_objects, prepare
from execauth.serving.worker import (
    SHARED_GENERATION_VARIABLE,
    SURFACES_VARIABLE,
    WORKER_SLOTS_VARIABLE,
    WRITER_SOCKET_VARIABLE,
)
from execauth.serving.writer_process import WriterProcess


def serve(
    host: Annotated[str | None, typer.Option(help="Address to listen on [EXECAUTH_HOST].")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on [EXECAUTH_PORT].")] = None,
    surface: Annotated[
        list[str] | None,
        typer.Option(help="Serve only these surfaces (gateway, console, operator); repeatable."),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1, max=64, help="Serving processes, about one per core [EXECAUTH_WORKERS]."
        ),
    ] = None,
    log_level: Annotated[
        str | None,
        typer.Option(help="Log level of every process: debug, info… [EXECAUTH_LOG_LEVEL]."),
    ] = None,
) -> None:
    """Run the service (all surfaces unless --surface narrows them)."""
    # The workers read their settings from the environment, like this process; so does
    # the issuer, derived from host and port unless EXECAUTH_ISSUER is set.
    # So does the log level: the writer and the workers configure their own logging.
    options = (("WORKERS", workers), ("HOST", host), ("PORT", port), ("LOG_LEVEL", log_level))
    for name, value in options:
        if value is not None:
            os.environ[f"EXECAUTH_{name}"] = str(value)
    settings = Settings()
    if settings.workers is None:
        # One gateway process per usable core, as a deployer would run it (the workers
        # read the count from the environment too).
        os.environ["EXECAUTH_WORKERS"] = str(serving_processes())
        settings = Settings()
    processes = settings.workers or 1
    chosen = tuple(surface) if surface else SURFACES
    unknown = [s for s in chosen if s not in SURFACES]
    if unknown:
        raise typer.BadParameter(f"unknown surface(s): {', '.join(unknown)}")
    # ps shows the role of each process; with one worker this one does everything.
    name_process("server" if settings.workers == 1 else "supervisor")
    setup_logging(settings)
    listen = (host or settings.host, port or settings.port, settings.log_level)
    proxies = settings.forwarded_allow_ips
    if settings.workers == 1:
        runtime = bootstrap(settings)
        _show_admin_token(runtime.generated_admin_token)
        app = create_app(runtime, surfaces=chosen)
        freeze_startup_objects()
        _run_uvicorn(
            app,
            *listen,
            settings=settings,
            forwarded_allow_ips=proxies,
        )
        return
    # Several processes, each with its own GIL (docs/architecture.md): prepare once here,
    # start the writer process, then let uvicorn start the gateway workers, which share
    # the listening socket and hand their receipts to the writer.
    _show_admin_token(prepare(settings))
    scratch = tempfile.mkdtemp(prefix="execauth-serve-")
    os.environ[MULTIPROCESS_DIR_VARIABLE] = str(Path(scratch, "metrics"))
    Path(scratch, "metrics").mkdir()
    os.environ[SURFACES_VARIABLE] = ",".join(chosen)
    writer = WriterProcess(
        str(Path(scratch, "writer.sock")), drain_seconds=settings.shutdown_timeout_seconds
    )
    os.environ[WRITER_SOCKET_VARIABLE] = writer.socket_path
    os.environ[WORKER_SLOTS_VARIABLE] = str(Path(scratch, "slots"))
    Path(scratch, "slots").mkdir()
    os.environ[SHARED_GENERATION_VARIABLE] = str(Path(scratch, "generation"))
    try:
        writer.start()
        _run_uvicorn(
            "execauth.serving.worker:worker_app",
            *listen,
            settings=settings,
            workers=processes,
            forwarded_allow_ips=proxies,
        )
    finally:
        writer.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def _run_uvicorn(
    app: Starlette | str,
    host: str,
    port: int,
    log_level: str,
    *,
    settings: Settings,
    workers: int = 1,
    forwarded_allow_ips: str = "",
) -> None:
    """uvicorn as we serve: uvloop, httptools with our limits (api/server_limits.py), our
    logging (execauth/observability/logs.py; each worker process applies it again), no access log
    unless EXECAUTH_ACCESS_LOG; a string app is a factory.

    Forwarded headers are believed only from ``forwarded_allow_ips`` (EXECAUTH_FORWARDED_ALLOW_IPS):
    uvicorn would otherwise trust them from 127.0.0.1 (or $FORWARDED_ALLOW_IPS) by default.
    """
    limits = ServerLimits(
        max_url_bytes=settings.max_url_bytes,
        max_head_bytes=settings.max_header_bytes,
        head_timeout_seconds=settings.request_head_timeout_seconds,
        request_timeout_seconds=settings.request_timeout_seconds,
    )
    config = LimitedConfig(
        app,
        limits=limits,
        host=host,
        port=port,
        workers=workers if isinstance(app, str) else None,
        factory=isinstance(app, str),
        loop="uvloop",
        log_config=logging_config(settings),
        log_level=log_level,
        access_log=settings.access_log,
        server_header=False,
        # Past this many connections (or requests in progress) a request gets 503; the
        # read deadlines of server_limits keep half-sent connections from holding it.
        limit_concurrency=settings.max_connections,
        timeout_keep_alive=math.ceil(settings.keep_alive_timeout_seconds),
        # SIGTERM: stop accepting, let in-flight requests finish (at most this long).
        timeout_graceful_shutdown=math.ceil(settings.shutdown_timeout_seconds),
        proxy_headers=bool(forwarded_allow_ips),
        forwarded_allow_ips=forwarded_allow_ips or None,
    )
    server = uvicorn.Server(config)
    if config.workers > 1:
        # What uvicorn.run does for workers, with our Config (it carries the limits).
        Multiprocess(config, sockets=[config.bind_socket()]).run()
        return
    config.load_app()
    server.run()
    if not server.started:
        raise SystemExit(STARTUP_FAILURE)


def _show_admin_token(token: str | None) -> None:
    if token is None:
        return
    Console(stderr=True).print(
        Panel(
            f"[bold]{token}[/bold]\n\n"
            "This admin token is shown once. Keep it in a secret store and use it as\n"
            "EXECAUTH_ADMIN_TOKEN for the console API and the CLI.",
            title="execauth: generated admin token",
        )
    )
