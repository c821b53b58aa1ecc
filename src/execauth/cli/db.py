"""``execauth db``: schema migrations."""

from __future__ import annotations

import typer
from rich.console import Console

from execauth.config import Settings
from execauth.serving.runtime import open_stores

app = typer.Typer(help="Database schema management.", no_args_is_help=True)


@app.command("upgrade")
def upgrade() -> None:
    """Apply every pending migration to EXECAUTH_DATABASE_URL."""
    settings = Settings()
    _, engine = open_stores(settings, migrate=True)
    engine.dispose()
    Console(stderr=True).print(f"database at {engine.url.render_as_string()} is up to date")
