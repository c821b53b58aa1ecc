"""``execauth mcp``: an MCP gateway that asks execauth before every tool call.

``execauth mcp --actor A [--map FILE] [--hide-denied POLICY] -- COMMAND ARGS...`` runs
COMMAND (an MCP server speaking stdio) as a child (or, with ``--remote URL``, talks to a
remote server over streamable HTTP) and serves MCP on its own stdin and stdout to the
agent. Each ``tools/call`` becomes an execute; only a verified PERMIT lets
it through (execauth.agents, docs/agents.md). The API key comes from EXECAUTH_API_KEY.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import typer

from execauth.cli.options import DEFAULT_URL, UrlOption

EX_USAGE = 2


def _usage(message: str) -> typer.Exit:
    print(f"execauth mcp: {message}", file=sys.stderr)
    return typer.Exit(EX_USAGE)


def mcp_gateway(
    command: Annotated[
        list[str] | None,
        typer.Argument(help="The MCP server to run (stdio), after --.", show_default=False),
    ] = None,
    actor: Annotated[
        str | None,
        typer.Option(
            envvar="EXECAUTH_MCP_ACTOR",
            help="The agent's identity, the actor of every decision (or the map's 'actor').",
        ),
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(help="The <server> in default surfaces mcp.<server>.<tool>."),
    ] = None,
    tool_map: Annotated[
        Path | None,
        typer.Option(
            "--map",
            help="YAML mapping file: server, actor, tools: {tool: surface}.",
            dir_okay=False,
            exists=True,
        ),
    ] = None,
    hide_denied: Annotated[
        Path | None,
        typer.Option(
            help="Policy file or directory: leave out of tools/list the tools whose "
            "surface has only deny rules there (calls are still decided by the service).",
            exists=True,
        ),
    ] = None,
    keys: Annotated[
        Path | None,
        typer.Option(
            help="A pinned key list (saved service-keys.json) to verify receipts against. "
            "Stronger than the default, which fetches the keys from the service.",
            dir_okay=False,
            exists=True,
        ),
    ] = None,
    remote: Annotated[
        str | None,
        typer.Option(
            help="A remote MCP server's streamable-HTTP URL, instead of a command.",
            show_default=False,
        ),
    ] = None,
    approval_wait: Annotated[
        float,
        typer.Option(
            min=0,
            help="Seconds a call the policy escalates waits for a person's approval "
            "(with progress notifications), then is refused; 0 refuses at once.",
        ),
    ] = 60.0,
    timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds to wait for each HTTP answer.")
    ] = 10.0,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Serve MCP to an agent; each tool call reaches COMMAND only under a verified PERMIT.

    The API key comes from EXECAUTH_API_KEY, never from a flag.
    """
    # Imported here: the MCP SDK and the policy engine are only for this command.
    try:
        from execauth.agents.runner import API_KEY_ENV, GatewaySettings, serve_stdio
    except ImportError as exc:  # the optional extra, or the SDK, is not installed
        raise _usage(
            f"{exc.name} is not installed; from a checkout of execauth at the commit you "
            "reviewed: pip install '.[mcp]' ./sdk/python"
        ) from exc
    from execauth.agents.tool_map import ToolMap, ToolMapInvalid, load_tool_map

    if bool(command) == bool(remote):
        raise _usage("give the MCP server's command after --, or --remote URL (one of them)")
    if remote and urlsplit(remote).scheme not in ("http", "https"):
        raise _usage(f"--remote must be an http(s) URL, not {remote!r}")
    api_key = os.environ.get(API_KEY_ENV)
    if not api_key:
        raise _usage(f"set {API_KEY_ENV} (an execute key of the agent's organization)")
    try:
        mapping = load_tool_map(tool_map) if tool_map else ToolMap()
    except ToolMapInvalid as exc:
        raise _usage(str(exc)) from exc
    who = actor or mapping.actor
    if not who:
        raise _usage("say who the agent is: --actor, EXECAUTH_MCP_ACTOR or the map's 'actor'")
    if command and shutil.which(command[0]) is None:
        raise _usage(f"command not found: {command[0]}")
    settings = GatewaySettings(
        command=command or [], actor=who, url=url, api_key=api_key, tool_map=mapping,
        server=server, timeout=timeout, remote=remote, approval_wait=approval_wait,
    )  # fmt: skip
    if keys is not None:
        from execauth_client import KeyList, KeyListError

        try:
            pinned = KeyList.from_document(json.loads(keys.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyListError) as exc:
            raise _usage(f"{keys}: not a key list: {exc}") from exc
        settings = dataclasses.replace(settings, keys=pinned)
    if hide_denied is not None:
        from execauth.agents.listing import always_denied_by_files
        from execauth.policy.testing import PolicyFileInvalid

        try:
            hidden = always_denied_by_files(hide_denied)
        except PolicyFileInvalid as exc:
            raise _usage(str(exc)) from exc
        settings = dataclasses.replace(settings, hidden=hidden)

    import anyio

    anyio.run(serve_stdio, settings)
