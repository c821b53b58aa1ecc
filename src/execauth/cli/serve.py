"""``execauth serve``: migrate, make sure a signing key and an admin credential exist, serve."""

from __future__ import annotations

import logging
from typing import Annotated

import typer
import uvicorn
from rich.console import Console
from rich.panel import Panel

from execauth.api.app import SURFACES, create_app
from execauth.config import Settings
from execauth.runtime import bootstrap


def serve(
    host: Annotated[str | None, typer.Option(help="Address to listen on [EXECAUTH_HOST].")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on [EXECAUTH_PORT].")] = None,
    surface: Annotated[
        list[str] | None,
        typer.Option(help="Serve only these surfaces (gateway, console, operator); repeatable."),
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Run the service (all surfaces unless --surface narrows them)."""
    settings = Settings()
    chosen = tuple(surface) if surface else SURFACES
    unknown = [s for s in chosen if s not in SURFACES]
    if unknown:
        raise typer.BadParameter(f"unknown surface(s): {', '.join(unknown)}")
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    runtime = bootstrap(settings)
    err = Console(stderr=True)
    if runtime.generated_admin_token is not None:
        err.print(
            Panel(
                f"[bold]{runtime.generated_admin_token}[/bold]\n\n"
                "This admin token is shown once. Keep it in a secret store and use it as\n"
                "EXECAUTH_ADMIN_TOKEN for the console API and the CLI.",
                title="execauth: generated admin token",
            )
        )
    uvicorn.run(
        create_app(runtime, surfaces=chosen),
        host=host or settings.host,
        port=port or settings.port,
        loop="uvloop",
        http="httptools",
        log_level=log_level,
        access_log=False,
        server_header=False,
    )
