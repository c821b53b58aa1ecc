"""``execauth policy check``, ``test`` and ``eval``: offline, no server.

Thin: checking, loading, running and explaining live in ``execauth.policy.files``,
``execauth.policy.testing`` and ``execauth.policy.explain``; this module reads arguments
and prints. It imports nothing of the server (no Starlette, no SQLAlchemy), so that a
check in CI or a pre-commit hook starts fast.
Exit codes (docs/policy-language.md): ``check`` 0 when every file would be published, 1
when one would be refused, 2 on a usage error; ``test`` 0 when every case passes, 1 when
a case fails or a policy is invalid, 2 on a usage error; ``eval`` 0 once it has decided,
1 when a policy is invalid, 2 on a usage error.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from execauth.errors import InvalidRequest
from execauth.policy.explain import Explanation, explain_body
from execauth.policy.files import check_files, describe_problem, policy_files
from execauth.policy.testing import (
    DEFAULT_ORG,
    CaseFileError,
    CaseResult,
    PolicyFileInvalid,
    SuiteReport,
    load_policies,
    run_suite,
)
from execauth.wire_time import format_timestamp, parse_timestamp, truncate_to_millis

EXIT_FAILED, EXIT_USAGE = 1, 2
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a report.")]
COLORS = {"PERMIT": "green", "DENY": "red", "SILENCE": "yellow"}


def policy_check(
    path: Annotated[
        Path, typer.Argument(help="A policy file, or a directory of policies (not recursive).")
    ],
) -> None:
    """Check policies offline exactly as publishing would: exit 1 naming each refusal."""
    _must_exist(path)
    files = policy_files(path)
    if not files:
        _usage(f"no policy documents (*.yaml, *.yml, *.json) in {path}")
    try:
        checked = check_files(files)
    except (OSError, UnicodeDecodeError) as exc:
        _usage(f"cannot read: {exc}")
    refused = [result for result in checked if not result.valid]
    for result in checked:
        if result.valid:
            typer.echo(f"ok       {result.policy_id} ({result.path})")
    for result in refused:
        typer.echo(f"refused  {result.policy_id} ({result.path}):", err=True)
        for problem in result.problems:
            typer.echo(f"  {describe_problem(result.path, problem)}", err=True)
    typer.echo(f"{len(checked) - len(refused)} valid, {len(refused)} refused")
    if refused:
        raise typer.Exit(EXIT_FAILED)


def policy_test(
    policy_dir: Annotated[
        Path, typer.Argument(help="A directory of policies (or one policy file) to test.")
    ],
    cases: Annotated[
        Path | None,
        typer.Option("--cases", help="A case file. Default: every *.cases.yaml beside them."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Run table-driven test cases against policies, offline, as the server would decide."""
    _must_exist(policy_dir)
    if cases is not None:
        _must_exist(cases)
    try:
        report = run_suite(policy_dir, cases)
    except CaseFileError as exc:
        _usage(str(exc))
    except PolicyFileInvalid as exc:
        _invalid(exc, as_json)
    except OSError as exc:
        _usage(f"cannot read: {exc}")
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        _print_report(report)
    if report.failed:
        raise typer.Exit(EXIT_FAILED)


def policy_eval(
    policy: Annotated[Path, typer.Argument(help="A policy file or a directory of policies.")],
    request: Annotated[
        Path, typer.Option("--request", help="The execute request body (JSON or YAML).")
    ],
    now: Annotated[
        str | None, typer.Option("--now", help="Decision time, RFC 3339 (default: now).")
    ] = None,
    org: Annotated[
        str | None,
        typer.Option(
            "--org", help='Org facts as JSON, merged over {"id":"org_test","plan":"free"}.'
        ),
    ] = None,
    show_explain: Annotated[
        bool, typer.Option("--explain", help="Show every block, require path and rule.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Decide one request under local policies; with --explain, show why."""
    _must_exist(policy)
    _must_exist(request)
    try:
        # The current time, as the service would decide now; --now to replay another moment.
        moment = truncate_to_millis(parse_timestamp(now) if now else datetime.now(UTC))
    except ValueError as exc:
        _usage(f"--now: {exc}")
    org_facts = {**DEFAULT_ORG, **_org(org)}
    try:
        body = yaml.safe_load(request.read_text(encoding="utf-8"))
        policies, _ = load_policies(policy_files(policy))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        _usage(f"cannot read: {exc}")
    except PolicyFileInvalid as exc:
        _invalid(exc, as_json)
    try:
        explanation = explain_body(policies, body, now=moment, org=org_facts)
    except InvalidRequest as exc:
        if as_json:
            typer.echo(json.dumps({"decision": "INVALID_REQUEST", "message": str(exc)}, indent=2))
        else:
            typer.echo(f"INVALID_REQUEST: the server would answer 400 invalid_request: {exc}")
        return
    if as_json:
        answer = explanation.as_dict()
        if not show_explain:
            keys = ("surface", "decision", "rule_id", "reason", "message", "ttl_seconds")
            answer = {k: answer[k] for k in keys}
        answer["now"] = format_timestamp(moment)
        typer.echo(json.dumps(answer, indent=2))
        return
    console = Console(highlight=False, soft_wrap=True)
    _print_decision(console, explanation)
    if show_explain:
        _print_explanation(console, explanation, moment)


def _org(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        _usage(f"--org is not JSON: {exc}")
    if not isinstance(value, dict):
        _usage("--org must be a JSON object")
    return dict(value)


def _must_exist(path: Path) -> None:
    if not path.exists():
        _usage(f"{path} does not exist")


def _usage(message: str) -> Any:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


def _invalid(exc: PolicyFileInvalid, as_json: bool) -> Any:
    if as_json:
        problems = [p.as_dict() for p in exc.problems]
        typer.echo(json.dumps({"invalid_policy": str(exc.path), "problems": problems}, indent=2))
    else:
        typer.echo(f"invalid policy {exc.path}:", err=True)
        for problem in exc.problems:
            typer.echo(f"  {problem}", err=True)
    raise typer.Exit(EXIT_FAILED)


def _decision_text(decision: str) -> str:
    color = COLORS.get(decision, "cyan")
    return f"[bold {color}]{decision}[/]"


def _print_report(report: SuiteReport) -> None:
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"policies: {escape(', '.join(report.policies))}")
    current: Path | None = None
    for result in report.results:
        if result.case.source != current:
            current = result.case.source
            console.print(f"\n[bold]{escape(str(current))}[/]")
        _print_case(console, result)
    summary = f"{report.passed} passed, {report.failed} failed"
    console.print(f"\n[bold {'red' if report.failed else 'green'}]{summary}[/]")


def _print_case(console: Console, result: CaseResult) -> None:
    actual = result.actual
    detail = " ".join(x for x in (actual.rule_id, actual.reason) if x)
    mark = "[green]✓[/]" if result.passed else "[red]✗[/]"
    console.print(
        f"  {mark} {escape(result.case.name)}  {_decision_text(actual.decision)} {escape(detail)}"
    )
    for mismatch in result.mismatches:
        console.print(f"      [red]{escape(mismatch)}[/]")
    if not result.passed and actual.message:
        console.print(f"      message: {escape(actual.message)}")


def _print_decision(console: Console, explanation: Explanation) -> None:
    answer = explanation.as_dict()
    line = _decision_text(explanation.outcome)
    for key in ("rule_id", "reason"):
        if answer[key]:
            line += f"  {key}={escape(str(answer[key]))}"
    if answer["ttl_seconds"]:
        line += f"  ttl={answer['ttl_seconds']}s"
    console.print(line)
    if answer["message"]:
        console.print(f"  {escape(answer['message'])}")


def _print_explanation(console: Console, explanation: Explanation, now: Any) -> None:
    answer = explanation.as_dict()
    console.print(f"\n[bold]surface[/] {escape(explanation.surface)}  now {format_timestamp(now)}")
    console.print("[bold]blocks considered[/]")
    for block in answer["blocks"]:
        mark = "→" if block["chosen"] else ("·" if block["matched"] else " ")
        console.print(
            f"  {mark} {escape(block['policy_id'])}[{block['block']}] "
            f"{escape(block['match'])}: {escape(block['why'])}"
        )
    if explanation.trace is None:
        console.print(f"[bold]why[/] {escape(explanation.why)}")
        return
    if answer["require"]:
        console.print("[bold]require[/]")
        for check in answer["require"]:
            state = "[green]present[/]" if check["present"] else "[red]missing[/]"
            console.print(f"  {escape(check['path'])}: {state}")
    console.print("[bold]rules[/]")
    for rule in answer["rules"]:
        if rule["error"] is not None:
            value = f"[yellow]error[/]: {escape(rule['error'])}"
        else:
            value = "[green]true[/]" if rule["value"] else "false"
        console.print(f"  {rule['effect']:6} {escape(rule['id'])}: {value}")
    for rule_id in answer["not_evaluated"]:
        console.print(f"  {'':6} {escape(rule_id)}: [dim]not evaluated[/]")
    console.print(f"[bold]why[/] {escape(explanation.why)} → {_decision_text(explanation.outcome)}")
    if explanation.outcome in ("PERMIT", "ESCALATE"):
        # The terms the executor must keep travel with the yes; --json always has them.
        console.print(f"[bold]grant[/] {escape(_grant_text(answer))}")


def _grant_text(answer: dict[str, Any]) -> str:
    parts = []
    if answer["constraints"] is not None:
        constraints = json.dumps(answer["constraints"], sort_keys=True, ensure_ascii=False)
        parts.append(f"constraints {constraints}")
    if answer["single_use"]:
        parts.append("single use (consume before acting)")
    return "; ".join(parts) or "none (no constraints, not single use)"
