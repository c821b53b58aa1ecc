"""``execauth policy``: publish and inspect an organization's policies.

``push`` and ``sync`` take a file or a directory, check every document offline first
(``execauth.policy.files``, the publish check) and send nothing unless all pass; they
act as the platform admin with ``--org`` (console API), else as the organization's own
admin key (operator API). ``sync`` publishes only documents whose ``policy_hash`` differs
from the published version's (``execauth.policy.sync``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from execauth.cli.console_client import (
    DEFAULT_URL,
    EXIT_FAILED,
    EXIT_USAGE,
    TOKEN_ENV,
    JsonFlag,
    OrgId,
    UrlOption,
    console_call,
    emit,
    print_json,
    print_record,
    rows,
)
from execauth.policy.files import (
    PolicyFile,
    check_files,
    check_text,
    describe_problem,
    policy_files,
)
from execauth.policy.sync import plan_sync

app = typer.Typer(help="Publish and inspect an organization's policies.", no_args_is_help=True)
API_KEY_ENV = "EXECAUTH_API_KEY"
POLICY_COLUMNS = ("policy_id", "version", "policy_hash", "created_at")
CONTENT_TYPES = {
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".json": "application/json",
}
PolicyId = Annotated[str, typer.Argument(help="The policy's id within the organization.")]


OrgOption = Annotated[
    str | None,
    typer.Option(
        "--org",
        help="Act as the platform admin (EXECAUTH_ADMIN_TOKEN) on this organization. "
        "Without it: as the organization's own admin key (EXECAUTH_API_KEY).",
    ),
]
PolicyPath = Annotated[
    Path, typer.Argument(help="A policy file, or a directory of policies (not recursive).")
]


@app.command("push")
def policy_push(
    path: PolicyPath,
    org: OrgOption = None,
    policy_id: Annotated[
        str | None,
        typer.Option(
            help="For one file: the id to publish it under (default: its policy_id, "
            "else the file name up to its first dot)."
        ),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonFlag = False,
) -> None:
    """Publish a new version of each policy at PATH; nothing is sent unless all are valid."""
    if policy_id is not None and not path.is_file():
        _usage("--policy-id names the id of one file; PATH is a directory")
    publisher = Publisher(url, org)
    answers = [publisher.publish(checked) for checked in _checked(path, policy_id)]
    if as_json:
        print_json(answers[0] if path.is_file() else {"published": answers})
        return
    for answer in answers:
        typer.echo(f"published {answer['policy_id']} v{answer['version']} {answer['policy_hash']}")


@app.command("sync")
def policy_sync(
    path: PolicyPath,
    org: OrgOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would be published; publish nothing.")
    ] = False,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Publish the policies at PATH whose document differs from the published version."""
    local = _checked(path, None)
    publisher = Publisher(url, org)
    plan = plan_sync(local, publisher.latest())
    verb = "would publish" if dry_run else "published"
    for step in plan.steps:
        if step.unchanged:
            typer.echo(f"unchanged {step.local.policy_id} v{step.published_version}")
            continue
        version = "" if dry_run else f" v{publisher.publish(step.local)['version']}"
        was = f" (was v{step.published_version})" if step.published_version else " (new)"
        typer.echo(f"{verb} {step.local.policy_id}{version}{was} from {step.local.path}")
    for kept_id, kept_version in plan.not_local:
        typer.echo(f"kept {kept_id} v{kept_version}: not in {path} (policies are never deleted)")
    typer.echo(f"{len(plan.changed)} {verb}, {len(plan.steps) - len(plan.changed)} unchanged")


class Publisher:
    """The console API as the platform admin (``--org``), else the operator API as the org's
    own admin key: the same publish endpoint and checks behind either door."""

    def __init__(self, url: str, org: str | None) -> None:
        self._url = url
        if org is not None:
            self._prefix, self._path, self._token = (
                "/console/v1",
                f"/orgs/{org}/policies",
                TOKEN_ENV,
            )
        else:
            if not os.environ.get(API_KEY_ENV, "").strip():
                _usage(
                    f"set {API_KEY_ENV} to an organization admin key, or pass --org ORG with "
                    f"{TOKEN_ENV} (secrets are never accepted as flags)"
                )
            self._prefix, self._path, self._token = "/operator", "/policies", API_KEY_ENV

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        return console_call(
            self._url, method, self._path + path, prefix=self._prefix, token_env=self._token,
            **kwargs,
        )  # fmt: skip

    def latest(self) -> dict[str, tuple[int, str]]:
        """policy_id → (latest version, its policy_hash)."""
        listed = self._call("GET", "")["policies"]
        return {p["policy_id"]: (p["version"], p["policy_hash"]) for p in listed}

    def publish(self, checked: PolicyFile) -> dict[str, Any]:
        answer: dict[str, Any] = self._call(
            "PUT", f"/{checked.policy_id}", content=checked.text.encode(),
            content_type=CONTENT_TYPES.get(checked.path.suffix.lower(), "application/yaml"),
            source=str(checked.path),
        )  # fmt: skip
        return answer


def _checked(path: Path, policy_id: str | None) -> list[PolicyFile]:
    """Every policy file at ``path``, checked as publishing would; exit 1 if one is refused."""
    if not path.exists():
        _usage(f"{path} does not exist")
    files = policy_files(path)
    if not files:
        _usage(f"no policy documents (*.yaml, *.yml, *.json) in {path}")
    try:
        if policy_id is not None:
            checked = [check_text(path, path.read_text(encoding="utf-8"), policy_id)]
        else:
            checked = check_files(files)
    except (OSError, UnicodeDecodeError) as exc:
        _usage(f"cannot read: {exc}")
    refused = [c for c in checked if not c.valid]
    for result in refused:
        typer.echo(f"refused  {result.policy_id} ({result.path}):", err=True)
        for problem in result.problems:
            typer.echo(f"  {describe_problem(result.path, problem)}", err=True)
    if refused:
        typer.echo("nothing was published", err=True)
        raise typer.Exit(EXIT_FAILED)
    return checked


def _usage(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


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
