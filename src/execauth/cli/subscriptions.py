"""``execauth subscription``: stream an organization's decisions to a webhook or JetStream.

Over the console API as the platform admin (docs/observability.md); an org's own
``admin`` key has the same operations under ``/operator/subscriptions``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from execauth.cli.console_client import (
    DEFAULT_URL,
    EXIT_USAGE,
    JsonFlag,
    OrgId,
    UrlOption,
    console_call,
    emit,
    print_record,
    rows,
)

app = typer.Typer(
    help="Stream an organization's decisions to a webhook or NATS JetStream.",
    no_args_is_help=True,
)
COLUMNS = ("subscription_id", "name", "sink", "target", "state", "lag", "delivered", "attempts")
SubscriptionId = Annotated[str, typer.Argument(help="The subscription (sub_…).")]


def _start(value: str) -> str | int:
    if value in ("now", "beginning"):
        return value
    if value.isascii() and value.isdigit():
        return int(value)
    raise typer.BadParameter("--start takes now, beginning or a log index")


def _print_created(answer: Mapping[str, Any]) -> None:
    print_record({k: v for k, v in answer.items() if k != "secret"})
    if "secret" in answer:
        typer.echo(f"secret: {answer['secret']}")
        typer.echo("This signing secret is shown once: give it to the webhook's receiver now.")


@app.command("create")
def create(
    org_id: OrgId,
    name: Annotated[str, typer.Option("--name", help="What the stream is for.")],
    webhook: Annotated[
        str | None, typer.Option("--webhook", help="Deliver to this http(s) URL.")
    ] = None,
    nats: Annotated[
        str | None, typer.Option("--nats", help="Publish to this JetStream subject.")
    ] = None,
    start: Annotated[
        str, typer.Option(help="now, beginning, or a log index to start from.")
    ] = "now",
    events: Annotated[
        str | None,
        typer.Option(
            "--events",
            help="Only these event types, comma-separated: execauth.decision, "
            "execauth.approval.pending|approved|rejected|expired, execauth.approval.*. "
            "Default: every event.",
        ),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonFlag = False,
) -> None:
    """Create a subscription; a webhook's signing secret is printed once, here."""
    if (webhook is None) == (nats is None):
        typer.echo("error: give exactly one of --webhook URL and --nats SUBJECT", err=True)
        raise typer.Exit(EXIT_USAGE)
    body: dict[str, Any] = {"name": name, "start": _start(start)}
    if events is not None:
        # The service validates the names: one list of known types, in one place.
        body["events"] = [e.strip() for e in events.split(",") if e.strip()]
    if webhook is not None:
        body |= {"sink": "webhook", "url": webhook}
    else:
        body |= {"sink": "nats", "subject": nats}
    answer = console_call(url, "POST", f"/orgs/{org_id}/subscriptions", body=body)
    emit(answer, as_json, _print_created)


@app.command("list")
def list_(org_id: OrgId, url: UrlOption = DEFAULT_URL, as_json: JsonFlag = False) -> None:
    """List the subscriptions with their state and lag."""
    answer = console_call(url, "GET", f"/orgs/{org_id}/subscriptions")
    emit(answer, as_json, rows("subscriptions", COLUMNS))


@app.command("show")
def show(
    org_id: OrgId,
    subscription_id: SubscriptionId,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonFlag = False,
) -> None:
    """One subscription, its last error and next attempt included."""
    answer = console_call(url, "GET", f"/orgs/{org_id}/subscriptions/{subscription_id}")
    emit(answer, as_json, print_record)


@app.command("pause")
def pause(
    org_id: OrgId,
    subscription_id: SubscriptionId,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonFlag = False,
) -> None:
    """Stop delivering; the cursor stays where it is."""
    path = f"/orgs/{org_id}/subscriptions/{subscription_id}/pause"
    emit(console_call(url, "POST", path), as_json, print_record)


@app.command("resume")
def resume(
    org_id: OrgId,
    subscription_id: SubscriptionId,
    start: Annotated[
        int | None, typer.Option(min=0, help="A log index; default: where it stopped.")
    ] = None,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonFlag = False,
) -> None:
    """Deliver again (after a pause or dead letter), where it stopped or from --start."""
    path = f"/orgs/{org_id}/subscriptions/{subscription_id}/resume"
    body = {} if start is None else {"start": start}
    emit(console_call(url, "POST", path, body=body), as_json, print_record)


@app.command("delete")
def delete(org_id: OrgId, subscription_id: SubscriptionId, url: UrlOption = DEFAULT_URL) -> None:
    """Remove a subscription."""
    console_call(url, "DELETE", f"/orgs/{org_id}/subscriptions/{subscription_id}")
    typer.echo(f"deleted {subscription_id}")
