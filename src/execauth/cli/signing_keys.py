"""``execauth signing-keys``: list, rotate and revoke the receipt-signing keys.

These act on the database directly; running instances pick changes up within
``EXECAUTH_REFRESH_INTERVAL_SECONDS``. A rotated-out key keeps its signing window
open for ``ROTATION_OVERLAP`` so no instance signs outside a key's window.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from execauth.config import Settings
from execauth.keyring import (
    ROTATION_OVERLAP,
    generate_signing_key,
    key_list_entry,
    needs_replacement,
    publication_lead,
)
from execauth.serving.runtime import open_stores
from execauth.store.signing_keys import SigningKeyStore
from execauth.tenancy.audit import AuditEvent, cli_actor
from execauth.wire_time import format_timestamp

app = typer.Typer(help="Manage the Ed25519 keys that sign receipts.", no_args_is_help=True)
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _open() -> tuple[SigningKeyStore, object]:
    settings = Settings()
    secret, engine = open_stores(settings, migrate=True)
    return SigningKeyStore(engine), secret


@app.command("list")
def list_keys(as_json: JsonFlag = False) -> None:
    """Show every signing key and its status."""
    store, _ = _open()
    entries = [key_list_entry(r) for r in store.all_keys()]
    if as_json:
        typer.echo(json.dumps(entries, indent=2))
        return
    table = Table("key_id", "status", "created_at", "expires_at")
    for e in entries:
        table.add_row(e["key_id"], e["status"], e["created_at"], e.get("expires_at") or "")
    Console().print(table)


@app.command("rotate")
def rotate() -> None:
    """Add a new active key; current keys retire after the overlap and stay published."""
    settings = Settings()
    secret, engine = open_stores(settings, migrate=True)
    store = SigningKeyStore(engine)
    now = datetime.now(UTC)
    # Published now, signing a little later: by then every running process lists it.
    signs_from = now + publication_lead(settings.refresh_interval_seconds)
    new_key = generate_signing_key(secret, signs_from)
    retire_at = new_key.created_at + ROTATION_OVERLAP
    retired = store.rotate(new_key, retire_at, cli_actor(), now=now)
    typer.echo(f"new signing key {new_key.key_id} signs from {format_timestamp(signs_from)}")
    for key_id in retired:
        typer.echo(f"retiring {key_id} at {format_timestamp(retire_at)}")


@app.command("revoke")
def revoke(
    key_id: Annotated[str, typer.Argument(help="The key to revoke (service_key_…).")],
) -> None:
    """Revoke a key: receipts it signed stop verifying. A revoked active key is replaced."""
    settings = Settings()
    secret, engine = open_stores(settings, migrate=True)
    store = SigningKeyStore(engine)
    now = datetime.now(UTC)
    records = {r.key_id: r for r in store.all_keys()}
    if key_id not in records:
        typer.echo(f"no signing key {key_id}", err=True)
        raise typer.Exit(1)
    if needs_replacement(records.values(), key_id, now):
        replacement = generate_signing_key(secret, now)
        store.insert_key(
            replacement,
            AuditEvent(None, now, cli_actor(), "signing_key.created", replacement.key_id),
        )
        typer.echo(f"new signing key {replacement.key_id}")
    store.revoke(key_id, now, cli_actor())
    typer.echo(f"revoked {key_id}")
