"""``execauth replay``: re-run stored decisions, or preview a draft policy's impact."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from execauth.cli.audit import SinceOption, UntilOption
from execauth.cli.console_client import (
    DEFAULT_URL,
    EXIT_FAILED,
    EXIT_USAGE,
    JsonFlag,
    UrlOption,
    console_call,
    print_json,
    print_table,
)
from execauth.policy.files import policy_id_of


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
        str | None,
        typer.Option(
            help="The policy the draft replaces (default: the draft's policy_id, else the file "
            "name up to its first dot)."
        ),
    ] = None,
    new: Annotated[
        bool,
        typer.Option(
            "--new", help="The draft is a new policy: report its impact beside the published ones."
        ),
    ] = False,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonFlag = False,
) -> None:
    """Replay [since, until): exit 1 on any mismatch. With --draft: the impact matrix.

    A draft whose policy id matches no published policy would be added, not replace one;
    unless --new says that is meant, that exits 1 naming the published ids, rather than
    print a report of no change that reads as "the draft changes nothing".
    """
    body: dict[str, Any] = {k: v for k, v in (("since", since), ("until", until)) if v}
    if draft is not None:
        text = _read(draft)
        body["policy"] = text
        body["policy_id"] = policy_id or policy_id_of(draft, text)
    source = str(draft) if draft is not None else None
    answer = console_call(url, "POST", f"/orgs/{org}/replay", body=body, source=source)
    if draft is not None and answer.get("published_version") is None and not new:
        _no_such_policy(url, org, body["policy_id"])
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


def _read(draft: Path) -> str:
    try:
        return draft.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        typer.echo(f"error: cannot read {draft}: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from exc


def _no_such_policy(url: str, org: str, policy_id: str) -> NoReturn:
    published = [
        p["policy_id"] for p in console_call(url, "GET", f"/orgs/{org}/policies")["policies"]
    ]
    typer.echo(
        f"error: no published policy has the id {policy_id!r} "
        f"(published: {', '.join(published) or 'none'}). Publishing the draft would add a "
        "new policy beside them, not change one, so its report is not the change you may "
        "expect. Name the policy it replaces with --policy-id, or pass --new to preview it "
        "as a new policy.",
        err=True,
    )
    raise typer.Exit(EXIT_FAILED)


def _print_impact(answer: dict[str, Any]) -> None:
    if answer.get("published_version") is None:
        typer.echo(f"draft {answer['policy_id']} is a new policy (no published policy has its id)")
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
