"""``execauth usage``: one organization's metered usage, and the billing export for all."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from execauth.cli.console_client import (
    DEFAULT_URL,
    EXIT_FAILED,
    JsonFlag,
    OrgId,
    UrlOption,
    check_month,
    console_call,
    emit,
    one_of,
    print_record,
    print_table,
    this_month,
)

EXPORT_COLUMNS = (
    "month", "org_id", "name", "plan", "executes", "permit", "deny", "silence", "quota_limit",
)  # fmt: skip
DECISIONS = ("PERMIT", "DENY", "SILENCE")

MonthOption = Annotated[
    str,
    typer.Option(
        default_factory=this_month,
        show_default="this month",
        callback=check_month,
        help="Calendar month YYYY-MM (UTC).",
    ),
]


class _OrgUsageByDefault(TyperGroup):
    """``execauth usage ORG_ID`` is short for ``execauth usage show ORG_ID``."""

    # ``ctx`` is typer's vendored click Context, whose module is private: hence Any.
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["show", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_OrgUsageByDefault,
    help="Metered usage: `usage ORG_ID` for one organization, `usage export` for billing.",
    no_args_is_help=True,
)


@app.command("show")
def usage_show(
    org_id: OrgId,
    month: MonthOption,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonFlag = False,
) -> None:
    """One organization's quota and executes for a month, by decision and surface."""
    answer = console_call(url, "GET", f"/orgs/{org_id}/usage", params={"month": month})
    emit(answer, as_json, _print_usage)


def _print_usage(answer: Mapping[str, Any]) -> None:
    executes = answer["executes"]
    summary = {k: answer.get(k) for k in ("org_id", "month", "plan")}
    summary |= {f"quota {k}": v for k, v in answer["quota"].items()}
    summary |= {"executes": executes["total"]}
    summary |= {d: executes["by_decision"].get(d, 0) for d in DECISIONS}
    print_record(summary, title="usage")
    by_surface = [{"surface": s, **counts} for s, counts in executes["by_surface"].items()]
    if by_surface:
        print_table(("surface", *DECISIONS, "total"), by_surface, title="by surface")


def export_csv(answer: Mapping[str, Any]) -> str:
    """The billing CSV: a header row, then one line per organization."""
    out = io.StringIO()
    writer = csv.DictWriter(out, EXPORT_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for org in answer["orgs"]:
        writer.writerow({"month": answer["month"], **org})
    return out.getvalue()


@app.command("export")
def usage_export(
    month: MonthOption,
    output_format: Annotated[
        str, typer.Option("--format", callback=one_of(("csv", "json")), help="csv or json.")
    ] = "csv",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Every organization's executes for a month, for a billing system."""
    answer = console_call(url, "GET", "/usage", params={"month": month})
    text = export_csv(answer) if output_format == "csv" else json.dumps(answer, indent=2) + "\n"
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text)
    except OSError as exc:
        typer.echo(f"error: cannot write {output}: {exc}", err=True)
        raise typer.Exit(EXIT_FAILED) from exc
