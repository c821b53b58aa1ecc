"""``execauth org``: create, list, show, re-plan, disable and enable organizations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from execauth.cli.console_client import (
    DEFAULT_URL,
    JsonFlag,
    OrgId,
    UrlOption,
    console_call,
    emit,
    one_of,
    print_record,
    rows,
)
from execauth.tenancy.orgs import WIRE_PROFILES

app = typer.Typer(help="Create and manage organizations.", no_args_is_help=True)
ORG_COLUMNS = ("org_id", "name", "plan", "wire_profile", "disabled")


def _patch_org(url: str, org_id: str, changes: Mapping[str, Any], as_json: bool) -> None:
    emit(console_call(url, "PATCH", f"/orgs/{org_id}", body=changes), as_json, print_record)


@app.command("create")
def org_create(
    name: Annotated[str, typer.Argument(help="Display name.")],
    plan: Annotated[
        str | None,
        typer.Option(help="Plan from the service's catalog. Default: the service's default plan."),
    ] = None,
    wire_profile: Annotated[
        str, typer.Option(callback=one_of(WIRE_PROFILES), help="Wire profile: a or b.")
    ] = "a",
    url: UrlOption = DEFAULT_URL,
    as_json: JsonFlag = False,
) -> None:
    """Create an organization."""
    body = {"name": name, "wire_profile": wire_profile} | ({"plan": plan} if plan else {})
    emit(console_call(url, "POST", "/orgs", body=body), as_json, print_record)


@app.command("list")
def org_list(url: UrlOption = DEFAULT_URL, as_json: JsonFlag = False) -> None:
    """List every organization."""
    emit(console_call(url, "GET", "/orgs"), as_json, rows("orgs", ORG_COLUMNS))


@app.command("show")
def org_show(org_id: OrgId, url: UrlOption = DEFAULT_URL, as_json: JsonFlag = False) -> None:
    """Show one organization."""
    emit(console_call(url, "GET", f"/orgs/{org_id}"), as_json, print_record)


@app.command("set-plan")
def org_set_plan(
    org_id: OrgId,
    plan: Annotated[str, typer.Argument(help="The new plan; applies from the next request.")],
    url: UrlOption = DEFAULT_URL,
    as_json: JsonFlag = False,
) -> None:
    """Move an organization to another plan."""
    _patch_org(url, org_id, {"plan": plan}, as_json)


@app.command("disable")
def org_disable(org_id: OrgId, url: UrlOption = DEFAULT_URL, as_json: JsonFlag = False) -> None:
    """Disable an organization: its keys stop working."""
    _patch_org(url, org_id, {"disabled": True}, as_json)


@app.command("enable")
def org_enable(org_id: OrgId, url: UrlOption = DEFAULT_URL, as_json: JsonFlag = False) -> None:
    """Enable a disabled organization again."""
    _patch_org(url, org_id, {"disabled": False}, as_json)
