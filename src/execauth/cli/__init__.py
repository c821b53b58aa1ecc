"""The ``execauth`` command line: one Typer app, one module per command group.

Each command's module is imported only when that command runs (or shows its own
``--help``): ``execauth --help``, ``verify`` or ``policy check`` must not pay for the
server (starlette, uvicorn, SQLAlchemy, the policy engine) that ``serve`` needs.
``execauth --help`` lists the commands from the one-line summaries below, short
enough for an 80-column terminal (tests/cli/test_cli_startup.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True, slots=True)
class LazyCommand:
    """Where a command lives (``module:attribute``, a function or a Typer app) and its summary."""

    target: str
    summary: str
    context_settings: Mapping[str, Any] = field(default_factory=dict)

    def load(self, name: str) -> Any:
        """The command as click sees it, importing its module now."""
        module_name, _, attribute = self.target.partition(":")
        target = getattr(importlib.import_module(module_name), attribute)
        if isinstance(target, typer.Typer):
            target.rich_markup_mode = None  # plain help, like the root's (see ``app``)
            group = typer.main.get_group(target)
            group.name = name
            return group
        single = typer.Typer(add_completion=False, rich_markup_mode=None)
        single.command(name, context_settings=dict(self.context_settings))(target)
        return typer.main.get_command(single)


COMMANDS: dict[str, LazyCommand] = {
    "serve": LazyCommand("execauth.cli.serve:serve", "Run the service."),
    "verify": LazyCommand(
        "execauth.cli.verify:verify", "Verify a receipt offline against a key list."
    ),
    "gate": LazyCommand(
        "execauth.cli.gate:gate",
        "Run a command only under a verified PERMIT.",
        # Everything after the first argument is the command, its own options included.
        {"allow_interspersed_args": False},
    ),
    "db": LazyCommand("execauth.cli.db:app", "Database schema management and backups."),
    "signing-keys": LazyCommand(
        "execauth.cli.signing_keys:app", "Manage the keys that sign receipts."
    ),
    "org": LazyCommand("execauth.cli.orgs:app", "Create and manage organizations."),
    "key": LazyCommand("execauth.cli.keys:app", "Issue, list, rotate and revoke API keys."),
    "policy": LazyCommand(
        "execauth.cli.policies:app", "Publish, inspect, test and evaluate policies."
    ),
    "usage": LazyCommand("execauth.cli.usage:app", "Metered usage, and its billing export."),
    "replay": LazyCommand(
        "execauth.cli.replay:replay", "Replay decisions, or preview a draft's impact."
    ),
    "export": LazyCommand(
        "execauth.cli.audit:export", "Write an organization's offline audit bundle."
    ),
    "audit": LazyCommand("execauth.cli.audit:app", "Check audit bundles offline."),
    "subscription": LazyCommand(
        "execauth.cli.subscriptions:app", "Stream decisions to a webhook or JetStream."
    ),
    "mcp": LazyCommand(
        "execauth.cli.mcp_gateway:mcp_gateway",
        "Gate an MCP server's tool calls for an agent.",
        {"allow_interspersed_args": False},
    ),
}


class _Listed(TyperCommand):
    """A command not loaded yet: enough for ``execauth --help`` to list it."""


class LazyGroup(TyperGroup):
    """The root group: lists every command, imports one only when it is resolved to run."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for name, command in COMMANDS.items():
            self.commands.setdefault(name, _Listed(name=name, help=command.summary))

    # ``ctx`` is typer's vendored click Context, whose module is private: hence Any.
    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        if args and isinstance(self.commands.get(args[0]), _Listed):
            self.commands[args[0]] = COMMANDS[args[0]].load(args[0])
        return super().resolve_command(ctx, args)


app = typer.Typer(
    name="execauth",
    cls=LazyGroup,
    help="Execution Authorization Service: signed, verifiable decisions for irreversible work.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's plain help and errors: Rich's formatter (and its Markdown parser) would
    # double the time `execauth --help` takes.
    rich_markup_mode=None,
)


def _package_version() -> str:
    # Imported here: importlib.metadata costs more at startup than the rest of this module.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("execauth")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from execauth import __version__

        return __version__


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"execauth {_package_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_show_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Execution Authorization Service: signed, verifiable decisions for irreversible work."""


def main() -> None:
    app()
