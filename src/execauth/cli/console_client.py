"""The admin CLI's shared plumbing: the console API call, error exits, output, argument checks."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from execauth.cli.options import DEFAULT_URL as DEFAULT_URL  # re-exported

if TYPE_CHECKING:
    # Imported where a call is made: commands that never reach the service (policy check,
    # policy test) would otherwise pay ~0.15 s for httpx at every start.
    import httpx
from execauth.cli.options import UrlOption as UrlOption  # re-exported
from execauth.wire_time import parse_timestamp

# Every admin command talks to ``--url`` (default ``$EXECAUTH_URL``) with the admin token
# from ``$EXECAUTH_ADMIN_TOKEN``; secrets are never flags, which would leak into shell
# history and ``ps``. Exit 0 on success, 1 when the service refused or
# could not be reached, 2 on a usage error (bad arguments, no token).
TOKEN_ENV = "EXECAUTH_ADMIN_TOKEN"  # noqa: S105 - the variable's name, not a secret
EXIT_FAILED, EXIT_USAGE = 1, 2
TIMEOUT_SECONDS = 30.0
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
UNBOUNDED = 1 << 20  # columns: a width no table reaches, to measure its natural size

JsonFlag = Annotated[bool, typer.Option("--json", help="Print the service's JSON.")]
OrgId = Annotated[str, typer.Argument(help="The organization (org_…).")]


# --- the one HTTP call ---------------------------------------------------------------


def console_call(
    url: str,
    method: str,
    path: str,
    *,
    body: Mapping[str, Any] | None = None,
    content: bytes | None = None,
    content_type: str | None = None,
    params: Mapping[str, str] | None = None,
    source: str | None = None,
    prefix: str = "/console/v1",
    token_env: str = TOKEN_ENV,
) -> Any:
    """Call ``/console/v1{path}`` as the platform admin; map every failure to an exit code.

    Returns the decoded JSON answer (``None`` for 204). ``source`` names the local file a
    refused request came from, so error details read ``file:line``. ``prefix="/operator"``
    with ``token_env="EXECAUTH_API_KEY"`` calls the operator surface as an org's own key.
    """
    import httpx

    token = os.environ.get(token_env, "").strip()
    if not token:
        typer.echo(
            f"error: {token_env} is not set; export it (it is never accepted as a flag)",
            err=True,
        )
        raise typer.Exit(EXIT_USAGE)
    headers = {"Authorization": f"Bearer {token}"}
    if content_type:
        headers["Content-Type"] = content_type
    try:
        response = httpx.request(
            method,
            url.rstrip("/") + prefix + path,
            json=body,
            content=content,
            params=params,
            headers=headers,
            timeout=TIMEOUT_SECONDS,
        )
    except httpx.InvalidURL as exc:
        typer.echo(f"error: --url {url!r} is not a valid URL: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from exc
    except httpx.HTTPError as exc:
        typer.echo(f"error: cannot reach the service at {url}: {exc}", err=True)
        raise typer.Exit(EXIT_FAILED) from exc
    if response.is_error:
        _report_error(response, source)
    if response.status_code == 204 or not response.content:
        return None
    try:
        return response.json()
    except ValueError as exc:
        typer.echo(f"error: {url} answered {response.status_code} with no JSON", err=True)
        raise typer.Exit(EXIT_FAILED) from exc


@contextmanager
def console_stream(
    url: str, path: str, *, params: Mapping[str, str] | None = None, timeout: float
) -> Iterator[httpx.Response]:
    """``GET /console/v1{path}`` as the platform admin, its body left unread for streaming.

    ``timeout`` bounds connecting and each wait for more of the body, not the whole
    transfer: an answer of any size arrives as long as it keeps arriving. Failures exit
    as ``console_call``'s do, also one that breaks the body off half way.
    """
    import httpx

    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        typer.echo(f"error: {TOKEN_ENV} is not set (it is never accepted as a flag)", err=True)
        raise typer.Exit(EXIT_USAGE)
    try:
        with httpx.stream(
            "GET", url.rstrip("/") + "/console/v1" + path, params=params,
            headers={"Authorization": f"Bearer {token}"}, timeout=timeout,
        ) as response:  # fmt: skip
            if response.is_error:
                response.read()
                _report_error(response, None)
            yield response
    except httpx.InvalidURL as exc:
        typer.echo(f"error: --url {url!r} is not a valid URL: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from exc
    except httpx.HTTPError as exc:
        typer.echo(f"error: the service at {url} failed: {exc!r}", err=True)
        raise typer.Exit(EXIT_FAILED) from exc


def _report_error(response: httpx.Response, source: str | None) -> None:
    """Print ``error: <code>: <message>`` (profile A or B body) and any details; exit 1."""
    try:
        body = response.json()
    except ValueError:
        body = None
    fields: Mapping[str, Any] = {}
    if isinstance(body, dict):
        error = body.get("error")
        fields = error if isinstance(error, dict) else {**body, "code": error}
    code = fields.get("code") or f"http_{response.status_code}"
    message = fields.get("message") or response.text[:200] or response.reason_phrase
    typer.echo(f"error: {code}: {message}", err=True)
    details = fields.get("details")
    for detail in details if isinstance(details, list) else []:
        if isinstance(detail, dict):
            typer.echo("  " + _describe_problem(detail, source), err=True)
    raise typer.Exit(EXIT_FAILED)


def _describe_problem(detail: Mapping[str, Any], source: str | None) -> str:
    where = f"{source or 'policy'}:{detail['line']}" if detail.get("line") else source or ""
    rule = f"rule {detail['rule_id']}" if detail.get("rule_id") else ""
    parts = [p for p in (where, rule, detail.get("path"), detail.get("reason")) if p]
    return ": ".join(str(p) for p in parts)


# --- output --------------------------------------------------------------------------


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON."""
    typer.echo(json.dumps(data, indent=2))


def emit(answer: Any, as_json: bool, render: Callable[[Any], None]) -> None:
    """``--json`` prints the service's answer as is; otherwise ``render`` makes it readable."""
    if as_json:
        print_json(answer)
    else:
        render(answer)


def rows(field: str, columns: Sequence[str]) -> Callable[[Mapping[str, Any]], None]:
    """Render ``answer[field]``, a list of objects, as a table of ``columns``."""
    return lambda answer: print_table(columns, answer[field])


def _cell(value: Any) -> Text:
    """Plain text, never Rich markup: names and messages come from users."""
    if value is None:
        text = ""
    elif isinstance(value, list):
        text = ", ".join(str(v) for v in value) or "*"  # an empty surface list allows all
    elif isinstance(value, dict):
        text = json.dumps(value)
    else:
        text = str(value)
    return Text(text)


def print_table(
    columns: Sequence[str], rows: Iterable[Mapping[str, Any]], title: str | None = None
) -> None:
    """Print ``rows`` as a table of ``columns``, or as one record per row when narrow.

    A table too wide for the terminal would have Rich cut its cells inside words (an id,
    a timestamp split over two lines cannot be copied or read). When even the longest
    word of each column does not fit side by side, each row is printed as a field/value
    record instead, where only a single word longer than a whole line can break.
    """
    console = Console()
    listed = list(rows)
    table = _table(columns, listed, title)
    # Rich's minimum width of a table: every column as wide as its longest word.
    narrowest = Measurement.get(console, console.options.update_width(UNBOUNDED), table).minimum
    if narrowest <= console.width:
        console.print(table)
        return
    for row in listed:
        print_record({c: row.get(c) for c in columns}, title)


def _table(columns: Sequence[str], rows: Sequence[Mapping[str, Any]], title: str | None) -> Table:
    table = Table(title=title)
    for column in columns:
        # Ids never wrap, so they can be copied; other cells wrap between words.
        table.add_column(column, overflow="fold", no_wrap=column.endswith("_id"))
    for row in rows:
        table.add_row(*(_cell(row.get(c)) for c in columns))
    return table


def print_record(record: Mapping[str, Any], title: str | None = None) -> None:
    """Print one object as a two-column field/value table."""
    rows = [{"field": k, "value": v} for k, v in record.items()]
    Console().print(_table(("field", "value"), rows, title))


# --- argument checks (usage errors, exit 2) ------------------------------------------


def parse_duration(text: str) -> int:
    """``30s``, ``15m``, ``24h``, ``7d`` (or plain seconds) → seconds."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhd]?)\s*", text.lower())
    if not match:
        raise typer.BadParameter(f"{text!r} is not a duration like 30s, 15m, 24h or 7d")
    return int(match.group(1)) * DURATION_UNITS[match.group(2) or "s"]


def check_duration(value: str) -> str:
    """Option callback: ``value`` must parse as a duration."""
    parse_duration(value)
    return value


def check_month(value: str) -> str:
    """Option callback: ``value`` must be a month ``YYYY-MM``."""
    if not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", value):
        raise typer.BadParameter(f"{value!r} is not a month like 2026-01")
    return value


def check_timestamp(value: str | None) -> str | None:
    """Option callback: ``value``, when given, must be an RFC 3339 timestamp."""
    if value is not None:
        try:
            parse_timestamp(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from exc
    return value


def one_of(choices: Sequence[str]) -> Callable[[str], str]:
    """Option callback factory: the value must be one of ``choices``."""

    def check(value: str) -> str:
        if value not in choices:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(choices)}")
        return value

    return check


def this_month() -> str:
    """The current calendar month in UTC, as the service counts quota."""
    return datetime.now(UTC).strftime("%Y-%m")
