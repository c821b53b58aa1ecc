"""``execauth export`` and ``execauth audit verify``: audit bundles made online, checked offline."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from execauth.cli.console_client import (
    DEFAULT_URL,
    EXIT_FAILED,
    EXIT_USAGE,
    UrlOption,
    check_timestamp,
    console_call,
)
from execauth.ledger.bundle import BundleError, verify_bundle

app = typer.Typer(help="Check audit bundles offline.", no_args_is_help=True)

SinceOption = Annotated[
    str | None,
    typer.Option("--since", callback=check_timestamp, help="From this time (RFC 3339)."),
]
UntilOption = Annotated[
    str | None,
    typer.Option("--until", callback=check_timestamp, help="Before this time (RFC 3339)."),
]


def export(
    org: Annotated[str, typer.Option("--org", help="The organization (org_…).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the bundle.")],
    since: SinceOption = None,
    until: UntilOption = None,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Write a self-contained audit bundle: receipts, proofs, leaf hashes, checkpoint, keys."""
    params = {k: v for k, v in (("since", since), ("until", until)) if v is not None}
    bundle = console_call(url, "GET", f"/orgs/{org}/export", params=params)
    output.write_text(json.dumps(bundle, indent=1, ensure_ascii=False) + "\n")
    typer.echo(
        f"wrote {output}: {len(bundle['receipts'])} receipts, log size {bundle['tree_size']}"
        + (f", {bundle['pending']} not yet sequenced (export again to include them)"
           if bundle["pending"] else "")
    )  # fmt: skip


@app.command("verify")
def verify(
    bundle_file: Annotated[Path, typer.Argument(help="A bundle written by `execauth export`.")],
    trusted_checkpoint: Annotated[
        Path | None,
        typer.Option(help="A checkpoint (signed note) you trusted earlier: prove consistency."),
    ] = None,
    keys: Annotated[
        Path | None,
        typer.Option(help="Your own copy of service-keys.json, instead of the bundle's."),
    ] = None,
) -> None:
    """Verify every signature, inclusion proof and log index; exit 0 only if all hold."""
    try:
        bundle = _load(bundle_file)
        keys_document = _load(keys) if keys is not None else None
        trusted = trusted_checkpoint.read_text() if trusted_checkpoint is not None else None
        report = verify_bundle(
            bundle,
            now=datetime.now(UTC),
            keys_document=keys_document,
            trusted_checkpoint=_checkpoint_text(trusted) if trusted is not None else None,
        )
    except (OSError, ValueError, BundleError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from exc
    for note in report.notes:
        typer.echo(f"ok: {note}")
    for failure in report.failures:
        typer.echo(f"FAIL: {failure}")
    expired = f", {report.expired_permits} expired PERMITs" if report.expired_permits else ""
    verdict = "VALID" if report.ok else "INVALID"
    typer.echo(f"{verdict}: {report.receipts_checked} receipts checked{expired}")
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def _checkpoint_text(text: str) -> str:
    """Accept the note itself or the JSON of ``GET /operator/log/checkpoint``."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        value = json.loads(stripped).get("checkpoint")
        if not isinstance(value, str):
            raise ValueError("the JSON has no 'checkpoint' field")
        return value
    # A note saved by a shell (`sqlite3 … > file`) or an editor gains a final newline;
    # the signatures cover only the text before the blank line, so dropping it is safe.
    return text.rstrip("\n") + "\n"
