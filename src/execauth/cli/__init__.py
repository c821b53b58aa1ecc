"""The ``execauth`` command line: one Typer app, one module per command group."""

from __future__ import annotations

import typer

from execauth.cli import db, serve, signing_keys, verify

app = typer.Typer(
    name="execauth",
    help="Execution Authorization Service: signed, verifiable decisions for irreversible work.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("serve")(serve.serve)
app.command("verify")(verify.verify)
app.add_typer(db.app, name="db")
app.add_typer(signing_keys.app, name="signing-keys")


def main() -> None:
    app()
