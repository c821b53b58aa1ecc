"""``execauth export`` and ``execauth audit verify``: audit bundles made online, checked offline."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    DownloadColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)

from execauth.cli.console_client import (
    DEFAULT_URL,
    EXIT_FAILED,
    EXIT_USAGE,
    UrlOption,
    check_timestamp,
    console_stream,
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
    timeout: Annotated[
        float,
        typer.Option(
            min=1.0,
            help="Seconds to wait to connect and for each further piece of the bundle "
            "(not for the whole export, which takes as long as its size needs).",
        ),
    ] = 60.0,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Write a self-contained audit bundle: receipts, proofs, leaf hashes, checkpoint, keys.

    The bundle is streamed to OUTPUT as it arrives (memory stays flat whatever its size),
    with progress on a terminal; an export that fails half way leaves no file behind.
    """
    params = {k: v for k, v in (("since", since), ("until", until)) if v is not None}
    partial = output.with_name(output.name + ".partial")
    with console_stream(url, f"/orgs/{org}/export", params=params, timeout=timeout) as answer:
        receipts = int(answer.headers.get("X-Bundle-Receipts", "0"))
        try:
            with partial.open("wb") as handle, _progress(receipts) as advance:
                for chunk in answer.iter_bytes():
                    handle.write(chunk)
                    advance(len(chunk))
        except OSError as exc:
            partial.unlink(missing_ok=True)
            typer.echo(f"error: cannot write {output}: {exc}", err=True)
            raise typer.Exit(EXIT_FAILED) from exc
        except BaseException:
            partial.unlink(missing_ok=True)  # a broken-off bundle must not pass for one
            raise
    partial.replace(output)
    pending = int(answer.headers.get("X-Bundle-Pending", "0"))
    typer.echo(
        f"wrote {output}: {receipts} receipts, log size {answer.headers.get('X-Bundle-Tree-Size')}"
        + (f", {pending} not yet sequenced (export again to include them)" if pending else "")
    )


@contextmanager
def _progress(receipts: int) -> Iterator[Callable[[int], None]]:
    """Bytes received so far, on stderr when it is a terminal; nothing otherwise."""
    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda _: None
        return
    columns = (
        TextColumn(f"exporting {receipts} receipts"),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("export", total=None)
        yield lambda size: progress.advance(task, size)


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
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
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
    if as_json:
        typer.echo(json.dumps({
            "status": "VALID" if report.ok else "INVALID",
            "receipts_checked": report.receipts_checked,
            "expired_permits": report.expired_permits,
            "notes": report.notes,
            "failures": report.failures,
        }, indent=2))  # fmt: skip
        raise typer.Exit(0 if report.ok else EXIT_FAILED)
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
