"""``execauth policy``: publish and inspect an organization's policies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from execauth.cli.console_client import (
    DEFAULT_URL,
    EXIT_FAILED,
    EXIT_USAGE,
    JsonFlag,
    OrgId,
    UrlOption,
    console_call,
    emit,
    print_json,
    print_record,
    rows,
)

app = typer.Typer(help="Publish and inspect an organization's policies.", no_args_is_help=True)
POLICY_COLUMNS = ("policy_id", "version", "policy_hash", "created_at")
CONTENT_TYPES = {
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".json": "application/json",
}
PolicyId = Annotated[str, typer.Argument(help="The policy's id within the organization.")]


@app.command("push")
def policy_push(
    org_id: OrgId,
    policy_id: PolicyId,
    file: Annotated[Path, typer.Argument(help="Policy document (.yaml, .yml or .json).")],
    url: UrlOption = DEFAULT_URL,
    as_json: JsonFlag = False,
) -> None:
    """Publish a new version of a policy; a refused document exits 1 with the reasons."""
    try:
        content = file.read_bytes()
    except OSError as exc:
        typer.echo(f"error: cannot read {file}: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from exc
    answer = console_call(
        url, "PUT", f"/orgs/{org_id}/policies/{policy_id}", content=content,
        content_type=CONTENT_TYPES.get(file.suffix.lower(), "application/yaml"), source=str(file),
    )  # fmt: skip
    emit(answer, as_json, print_record)


@app.command("list")
def policy_list(org_id: OrgId, url: UrlOption = DEFAULT_URL, as_json: JsonFlag = False) -> None:
    """List the latest version of each policy."""
    answer = console_call(url, "GET", f"/orgs/{org_id}/policies")
    emit(answer, as_json, rows("policies", POLICY_COLUMNS))


@app.command("show")
def policy_show(
    org_id: OrgId,
    policy_id: PolicyId,
    version: Annotated[int | None, typer.Option(min=1, help="Default: the latest.")] = None,
    source: Annotated[bool, typer.Option("--source", help="Print the published text.")] = False,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonFlag = False,
) -> None:
    """Show a policy version: metadata and document, or with --source the published text."""
    params = {"version": str(version)} if version is not None else None
    answer = console_call(url, "GET", f"/orgs/{org_id}/policies/{policy_id}", params=params)
    if as_json:
        print_json(answer)
    elif source:
        if not isinstance(answer.get("source"), str):
            typer.echo("error: the service's answer carries no policy source text", err=True)
            raise typer.Exit(EXIT_FAILED)
        typer.echo(answer["source"], nl=not answer["source"].endswith("\n"))
    else:
        print_record({k: answer.get(k) for k in POLICY_COLUMNS})
        typer.echo(json.dumps(answer.get("document"), indent=2))


# Offline tools (no server): ``policy check``, ``test`` and ``eval``, in their own module.
from execauth.cli import policy_tools  # noqa: E402

app.command("check")(policy_tools.policy_check)
app.command("test")(policy_tools.policy_test)
app.command("eval")(policy_tools.policy_eval)
