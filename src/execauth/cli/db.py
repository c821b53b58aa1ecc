"""``execauth db``: schema migrations, and backups of a SQLite database."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from sqlalchemy.engine import make_url

from execauth.config import Settings
from execauth.serving.runtime import open_stores
from execauth.store.database import back_up_sqlite, make_engine, normalize_url

app = typer.Typer(help="Database schema management and backups.", no_args_is_help=True)


@app.command("upgrade")
def upgrade() -> None:
    """Apply every pending migration to EXECAUTH_DATABASE_URL."""
    settings = Settings()
    _, engine = open_stores(settings, migrate=True)
    engine.dispose()
    Console(stderr=True).print(f"database at {engine.url.render_as_string()} is up to date")


@app.command("backup")
def backup(
    directory: Annotated[Path, typer.Argument(help="A new or empty directory for the copies.")],
) -> None:
    """Back up a SQLite EXECAUTH_DATABASE_URL online: the database file and its Merkle
    log file, in the order a restore needs (docs/operations.md, "Backup and restore").
    PostgreSQL: use pg_dump."""
    settings = Settings()
    console = Console(stderr=True)
    database = make_url(normalize_url(settings.database_url)).database
    if database and not database.startswith("file:") and not Path(database).exists():
        console.print(f"no database at {database} (EXECAUTH_DATABASE_URL)")
        raise typer.Exit(2)
    # The engine alone: a backup needs neither the secret key nor a migration.
    engine = make_engine(settings.database_url)
    try:
        written = back_up_sqlite(engine, directory)
    except ValueError:
        console.print("execauth db backup copies SQLite database files; for PostgreSQL use pg_dump")
        raise typer.Exit(2) from None
    except FileExistsError as exc:
        console.print(f"{exc.filename} exists: back up into a new or empty directory")
        raise typer.Exit(2) from None
    finally:
        engine.dispose()
    for path in written:
        console.print(f"wrote {path} (integrity check: ok)")
