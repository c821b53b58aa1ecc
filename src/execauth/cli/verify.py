"""``execauth verify``: check a receipt offline against a key list (exit 0 / 1 / 2)."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from execauth.cli.options import DEFAULT_URL
from execauth.verify import KeyListError, parse_key_list, unmet_expectations, verify_receipt

EXIT_VALID, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


class Decision(StrEnum):
    PERMIT = "PERMIT"
    DENY = "DENY"
    SILENCE = "SILENCE"


def _load_json(source: str, what: str) -> Any:
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
        return json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        typer.echo(f"error: cannot read {what} {source}: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from exc


def _load_keys(source: str) -> Any:
    if source.startswith(("http://", "https://")):
        import httpx  # here, not at the top: verifying against a file needs no HTTP client

        try:
            response = httpx.get(source, timeout=10)
            response.raise_for_status()
            return response.json()
        except (httpx.HTTPError, ValueError) as exc:
            typer.echo(f"INVALID: cannot fetch the key list from {source}: {exc}", err=True)
            raise typer.Exit(EXIT_INVALID) from exc
    return _load_json(source, "key list")


def verify(
    receipt_file: Annotated[str, typer.Argument(help="Receipt JSON file, or - for stdin.")],
    keys: Annotated[
        str | None,
        typer.Option(
            help="Key list file or URL. Default: $EXECAUTH_URL/.well-known/service-keys.json. "
            "Pass a file to verify with no network access."
        ),
    ] = None,
    expect_surface: Annotated[str | None, typer.Option(help="Fail unless surface is this.")] = None,
    expect_actor: Annotated[str | None, typer.Option(help="Fail unless actor is this.")] = None,
    expect_request_digest: Annotated[
        str | None, typer.Option(help="Fail unless request_digest is this (sha256:…).")
    ] = None,
    expect_decision: Annotated[
        Decision | None,
        typer.Option(
            help="Fail unless the decision is this. Defaults to PERMIT when any other "
            "--expect-* is given: a receipt used as a gate must authorize the work."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON.")] = False,
) -> None:
    """Verify a receipt's signature, key epoch and revocation; report an expired PERMIT.

    Exit 0 when the receipt is authentic, matches every --expect-* and (for a PERMIT) is
    unexpired; 1 when it is not; 2 on a usage error.
    """
    gating = any(v is not None for v in (expect_surface, expect_actor, expect_request_digest))
    # Checking "is this the receipt for my deploy?" must not pass on an authentic DENY.
    wanted_decision = expect_decision.value if expect_decision else "PERMIT" if gating else None
    receipt = _load_json(receipt_file, "receipt")
    source = keys or os.environ.get("EXECAUTH_URL", DEFAULT_URL).rstrip("/") + (
        "/.well-known/service-keys.json"
    )
    try:
        key_map, issuer = parse_key_list(_load_keys(source))
    except (KeyListError, AttributeError) as exc:
        typer.echo(f"error: {source} is not a key list: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from exc

    verdict = verify_receipt(receipt, key_map, now=datetime.now(UTC), issuer=issuer)
    mismatches = (
        unmet_expectations(
            receipt,
            surface=expect_surface,
            actor=expect_actor,
            request_digest=expect_request_digest,
            decision=wanted_decision,
        )
        if verdict.authentic
        else []
    )

    if not verdict.authentic:
        status, detail = "INVALID", f"{verdict.reason}: {verdict.detail}"
    elif mismatches:
        status, detail = "MISMATCH", "; ".join(mismatches)
    elif verdict.expired:
        status, detail = "EXPIRED", "authentic, but the PERMIT has expired"
    else:
        status, detail = "VALID", verdict.detail
    ok = status == "VALID"

    if as_json:
        out: dict[str, Any] = {
            "status": status,
            "authentic": verdict.authentic,
            "reason": verdict.reason,
            "detail": detail,
            "decision": verdict.decision,
            "key_id": verdict.key_id,
            "expired": verdict.expired,
            "approval_id": verdict.approval_id,
            "approvers": list(verdict.approvers),
            "mismatches": mismatches,
        }
        # The bound grant, as the receipt states it (docs/receipts.md, "Constraints"); taken
        # from the verdict, which carries it only for an authentic receipt, so a script
        # never acts on constraints nobody signed. Absent keys mean "no such term".
        if verdict.constraints is not None:
            out["constraints"] = dict(verdict.constraints)
        if verdict.single_use:
            out["single_use"] = True
        typer.echo(json.dumps(out))
    else:
        receipt_id = receipt.get("receipt_id", "?") if isinstance(receipt, dict) else "?"
        what = f"{verdict.decision or '?'} receipt {receipt_id}"
        typer.echo(
            f"{status}: {what} — {detail}" + (f" (key {verdict.key_id})" if verdict.key_id else "")
        )
    raise typer.Exit(EXIT_VALID if ok else EXIT_INVALID)
