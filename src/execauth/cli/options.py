"""Options every command that talks to the service shares; no heavy imports (see ``cli``)."""

from __future__ import annotations

from typing import Annotated

import typer

DEFAULT_URL = "http://127.0.0.1:8080"

UrlOption = Annotated[
    str,
    typer.Option("--url", envvar="EXECAUTH_URL", show_envvar=True, help="Base URL of the service."),
]
