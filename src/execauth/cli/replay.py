"""``execauth replay``: re-run stored decisions, or preview a draft policy's impact."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from execauth.cli.audit import SinceOption, UntilOption
from execauth.cli.console_client import (
    DEFAULT_URL,
    EXIT_FAILED,
    JsonFlag,
    UrlOption,
    console_call,
    print_json,
    print_table,
)


def replay(
    org: Annotated[str, typer.Option("--org", help="The organization (org_…).")],
    since: SinceOption = None,
    until: UntilOption = None,
    draft: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            readable=True,
            help="A draft policy file: report what publishing it would change.",
        ),
    ] = None,
    policy_id: Annotated[
        str | None, typer.Option(help="The policy the draft replaces (default: file stem).")
    ] = None,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonFlag = False,
) -> None:
    """Replay [since, until): exit 1 on any mismatch. With --draft: the impact matrix."""
    body: dict[str, Any] = {k: v for k, v in (("since", since), ("until", until)) if v}
    if draft is not None:
        body["policy"] = draft.read_text()
        body["policy_id"] = policy_id or draft.name.split(".")[0]
    answer = console_call(url, "POST", f"/orgs/{org}/replay", body=body)
    if as_json:
        print_json(answer)
    elif draft is None:
        typer.echo(f"replayed {answer['replayed']}, matched {answer['matched']}")
        for mismatch in answer["mismatches"]:
            typer.echo(
                f"MISMATCH {mismatch['execution_id']}: recorded "
                f"{_outcome(mismatch['recorded'])}, replayed {_outcome(mismatch['replayed'])}"
            )
    else:
        _print_impact(answer)
    if draft is None and answer["mismatches"]:
        raise typer.Exit(EXIT_FAILED)


def _print_impact(answer: dict[str, Any]) -> None:
    typer.echo(
        f"evaluated {answer['evaluated']}, decision would change for {answer['changed']}, "
        f"same decision by another rule or reason for {answer['rule_changed']}"
    )
    outcomes = list(answer["matrix"])
    print_table(
        ["recorded", *outcomes],
        [{"recorded": before, **row} for before, row in answer["matrix"].items()],
        title="recorded decision (rows) → decision under the draft (columns)",
    )
    for transition in answer["transitions"]:
        typer.echo(f"{transition['from']} → {transition['to']}: {transition['count']}")
        for sample in transition["samples"]:
            typer.echo(f"  {_describe(sample)}")
    for change in answer["rule_changes"]:
        typer.echo(f"{change['decision']}, another rule or reason: {change['count']}")
        for sample in change["samples"]:
            typer.echo(f"  {_describe(sample)}")


def _describe(sample: dict[str, Any]) -> str:
    before, after = sample["before"], sample["after"]
    return (
        f"{sample['execution_id']} ({sample['surface']}; rule {before['rule_id']} → "
        f"{after['rule_id']}, reason {before['reason']} → {after['reason']})"
    )


def _outcome(view: dict[str, Any]) -> str:
    return f"{view['decision']} (rule {view['rule_id']}, reason {view['reason']})"
