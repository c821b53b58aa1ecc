"""``execauth key``: issue, list, rotate and revoke an organization's API keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from execauth.cli.console_client import (
    DEFAULT_URL,
    JsonFlag,
    OrgId,
    UrlOption,
    check_duration,
    check_timestamp,
    console_call,
    emit,
    one_of,
    parse_duration,
    print_record,
    rows,
)
from execauth.tenancy.api_keys import ROLES

app = typer.Typer(
    help="Issue, list, rotate and revoke an organization's API keys.", no_args_is_help=True
)
KEY_COLUMNS = ("key_id", "name", "role", "surfaces", "expires_at", "revoked_at")
KeyId = Annotated[str, typer.Argument(help="The API key (key_…).")]


def _print_secret_once(answer: Mapping[str, Any]) -> None:
    """Show an issued or rotated key; its secret is printed here and can never be fetched."""
    print_record({k: v for k, v in answer.items() if k != "api_key"})
    typer.echo(f"api_key: {answer['api_key']}")
    typer.echo("This secret is shown once and cannot be retrieved again: store it now.")


@app.command("issue")
def key_issue(
    org_id: OrgId,
    name: Annotated[str, typer.Option("--name", help="What the key is for.")],
    role: Annotated[
        str, typer.Option(callback=one_of(ROLES), help=f"One of {', '.join(ROLES)}.")
    ] = "execute",
    surface: Annotated[
        list[str] | None,
        typer.Option(help="Allowed surface pattern (repeatable); default: every surface."),
    ] = None,
    expires_at: Annotated[
        str | None, typer.Option(callback=check_timestamp, help="RFC 3339 expiry.")
    ] = None,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonFlag = False,
) -> None:
    """Issue an API key; its secret is printed once, here."""
    body: dict[str, Any] = {"name": name, "role": role, "surfaces": list(surface or [])}
    if expires_at is not None:
        body["expires_at"] = expires_at
    answer = console_call(url, "POST", f"/orgs/{org_id}/keys", body=body)
    emit(answer, as_json, _print_secret_once)


@app.command("list")
def key_list(org_id: OrgId, url: UrlOption = DEFAULT_URL, as_json: JsonFlag = False) -> None:
    """List an organization's keys (never their secrets)."""
    emit(console_call(url, "GET", f"/orgs/{org_id}/keys"), as_json, rows("keys", KEY_COLUMNS))


@app.command("rotate")
def key_rotate(
    org_id: OrgId,
    key_id: KeyId,
    grace: Annotated[
        str,
        typer.Option(
            callback=check_duration,
            help="How long the old secret keeps working: 30s, 15m, 24h, 7d.",
        ),
    ] = "24h",
    url: UrlOption = DEFAULT_URL,
    as_json: JsonFlag = False,
) -> None:
    """Give a key a new secret; the old one works until the grace period ends."""
    body = {"grace_seconds": parse_duration(grace)}
    answer = console_call(url, "POST", f"/orgs/{org_id}/keys/{key_id}/rotate", body=body)
    emit(answer, as_json, _print_secret_once)


@app.command("revoke")
def key_revoke(
    org_id: OrgId, key_id: KeyId, url: UrlOption = DEFAULT_URL, as_json: JsonFlag = False
) -> None:
    """Revoke a key now. With --json prints {"key_id", "revoked": true}."""
    console_call(url, "DELETE", f"/orgs/{org_id}/keys/{key_id}")
    emit({"key_id": key_id, "revoked": True}, as_json, lambda _: typer.echo(f"revoked {key_id}"))
