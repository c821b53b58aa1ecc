"""The ``execauth`` command line: one Typer app, one module per command group."""

from __future__ import annotations

import typer

from execauth.cli import (
    audit,
    db,
    gate,
    keys,
    orgs,
    policies,
    replay,
    serve,
    signing_keys,
    usage,
    verify,
)

app = typer.Typer(
    name="execauth",
    help="Execution Authorization Service: signed, verifiable decisions for irreversible work.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("serve")(serve.serve)
app.command("verify")(verify.verify)
# Everything after the first argument is the command, its own options included.
app.command("gate", context_settings={"allow_interspersed_args": False})(gate.gate)
app.add_typer(db.app, name="db")
app.add_typer(signing_keys.app, name="signing-keys")
app.add_typer(orgs.app, name="org")
app.add_typer(keys.app, name="key")
app.add_typer(policies.app, name="policy")
app.add_typer(usage.app, name="usage")
app.command("replay")(replay.replay)
app.command("export")(audit.export)
app.add_typer(audit.app, name="audit")


def main() -> None:
    app()
