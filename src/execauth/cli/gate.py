"""``execauth gate``: run a command only under a verified PERMIT for exactly this request.

``execauth gate --surface S [--actor A] [--context k=v ...] -- COMMAND ARGS...`` asks the
service for a decision, verifies the receipt offline (``execauth.verify``) against the
service's published keys or a pinned ``--keys`` file, checks that it is an unexpired
PERMIT for the request it sent, and only then runs the command with the receipt's path
and id in its environment. Every other outcome, any error included, leaves the command
unrun: the only ``subprocess`` call sits behind the last check.

Exit status (sysexits, DESIGN.md §6): the command's own status when it ran (128+N when
signal N ended it); otherwise 77 on DENY, 75 on SILENCE, 69 when the service is
unreachable or answered an error, 65 when the receipt fails verification or does not
match the request (an expired PERMIT included), 2 on a usage error.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import httpx
import typer

from execauth.cli.options import DEFAULT_URL, UrlOption
from execauth.errors import InvalidRequest
from execauth.request import ExecuteRequest, parse_execute_request
from execauth.verify import (
    KeyListError,
    PublishedKey,
    parse_key_list,
    unmet_expectations,
    verify_receipt,
)

EX_USAGE, EX_DATAERR, EX_UNAVAILABLE, EX_TEMPFAIL, EX_NOPERM = 2, 65, 69, 75, 77
DECISION_STATUS = {"DENY": EX_NOPERM, "SILENCE": EX_TEMPFAIL}

API_KEY_ENV = "EXECAUTH_API_KEY"
RECEIPT_FILE_ENV = "EXECAUTH_RECEIPT_FILE"
RECEIPT_ID_ENV = "EXECAUTH_RECEIPT_ID"
KEYS_PATH = "/.well-known/service-keys.json"
# Signals a supervisor (CI runner, systemd, kill) sends to gate are meant for the work.
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Refused(Exception):
    """Why the command does not run, and gate's exit status for it."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Answer:
    """A receipt as received: the exact bytes (what the command gets) and their JSON."""

    raw: bytes
    receipt: dict[str, Any]

    @property
    def receipt_id(self) -> str:
        return str(self.receipt.get("receipt_id", "?"))

    @property
    def decision(self) -> str:
        return str(self.receipt.get("decision", "?"))


@dataclass(frozen=True, slots=True)
class KeyList:
    keys: dict[str, PublishedKey]
    issuer: str | None


def gate(
    surface: Annotated[str, typer.Option(help="The execution surface, e.g. deploy.production.")],
    command: Annotated[
        list[str] | None,
        typer.Argument(help="The command to run under a PERMIT, after --.", show_default=False),
    ] = None,
    actor: Annotated[str | None, typer.Option(help="Who is executing.")] = None,
    action: Annotated[str | None, typer.Option(help="The action within the surface.")] = None,
    context: Annotated[
        list[str] | None,
        typer.Option(help="Context for policy as key=value (a string); repeatable."),
    ] = None,
    keys: Annotated[
        Path | None,
        typer.Option(
            help="A pinned key list (saved service-keys.json). Stronger than the default, "
            "which fetches the keys from the same service that answered.",
            dir_okay=False,
        ),
    ] = None,
    receipt_file: Annotated[
        Path | None,
        typer.Option(
            help="Keep the receipt here (also a DENY's or SILENCE's). Default: a private "
            "temporary file, removed when the command ends.",
            dir_okay=False,
        ),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="Idempotency key of the request. Default: a fresh random one."),
    ] = None,
    timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds to wait for each HTTP answer.")
    ] = 10.0,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Run COMMAND only under a verified, unexpired PERMIT for exactly this request.

    The API key comes from EXECAUTH_API_KEY, never from a flag.

    COMMAND gets EXECAUTH_RECEIPT_FILE and EXECAUTH_RECEIPT_ID, not the API key.

    Exit status: COMMAND's own if it ran; else 77 DENY, 75 SILENCE, 69 service
    unreachable or error, 65 receipt not verified or not for this request, 2 usage error.
    """
    name = command[0] if command else "the command"
    try:
        status = _gate(
            surface=surface,
            command=command or [],
            actor=actor,
            action=action,
            context=context or [],
            keys_file=keys,
            receipt_file=receipt_file,
            idempotency_key=idempotency_key or str(uuid.uuid4()),
            timeout=timeout,
            url=url.rstrip("/"),
        )
    except Refused as refused:
        typer.echo(f"execauth gate: {refused.reason}; not running {name}", err=True)
        raise typer.Exit(refused.status) from None
    raise typer.Exit(status)


def _gate(
    *,
    surface: str,
    command: Sequence[str],
    actor: str | None,
    action: str | None,
    context: Sequence[str],
    keys_file: Path | None,
    receipt_file: Path | None,
    idempotency_key: str,
    timeout: float,
    url: str,
) -> int:
    # Everything the caller can get wrong is checked before a decision is spent on it.
    if not command:
        raise Refused(EX_USAGE, "no command given (put it after --)")
    api_key = os.environ.get(API_KEY_ENV, "").strip()
    if not api_key:
        raise Refused(EX_USAGE, f"{API_KEY_ENV} is not set (it is never accepted as a flag)")
    if shutil.which(command[0]) is None:
        raise Refused(EX_USAGE, f"command not found or not executable: {command[0]}")
    if receipt_file is not None and not receipt_file.parent.is_dir():
        raise Refused(EX_USAGE, f"--receipt-file: no directory {receipt_file.parent}")
    body = {
        "surface": surface,
        "actor": actor,
        "action": action,
        "context": _parse_context(context),
        "idempotency_key": idempotency_key,
    }
    try:
        # The digest gate expects is the one the service computes: same function.
        expected = parse_execute_request(body, None)
    except InvalidRequest as exc:
        raise Refused(EX_USAGE, f"invalid request: {exc}") from exc
    pinned = _load_pinned_keys(keys_file) if keys_file is not None else None

    with _http(url, timeout) as http:
        answer = _ask(http, api_key, body)
        key_list = pinned if pinned is not None else _fetch_keys(http)
    _check(answer, key_list, expected)
    if receipt_file is not None:
        _write(receipt_file, answer.raw)
    if answer.decision != "PERMIT":
        raise Refused(DECISION_STATUS.get(answer.decision, EX_NOPERM), _describe_block(answer))

    typer.echo(
        f"execauth gate: PERMIT {answer.receipt_id} (policy {answer.receipt.get('policy_id')} "
        f"rule {answer.receipt.get('rule_id')}, until {answer.receipt.get('expires_at')}); "
        f"running {command[0]}",
        err=True,
    )
    with _receipt_path(receipt_file, answer.raw) as path:
        return _run(command, path, answer.receipt_id)


def _parse_context(pairs: Sequence[str]) -> dict[str, str]:
    context: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise Refused(EX_USAGE, f"--context {pair!r} is not key=value")
        if key in context:
            raise Refused(EX_USAGE, f"--context {key} is given twice")
        context[key] = value
    return context


def _load_pinned_keys(path: Path) -> KeyList:
    try:
        document = json.loads(path.read_text())
        return KeyList(*parse_key_list(document))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Refused(EX_USAGE, f"cannot read the key list {path}: {exc}") from exc
    except (KeyListError, AttributeError) as exc:
        raise Refused(EX_USAGE, f"{path} is not a key list: {exc}") from exc


@contextmanager
def _http(url: str, timeout: float) -> Iterator[httpx.Client]:
    """One client for both calls; transport failures become exit 69, a bad --url exit 2."""
    try:
        with httpx.Client(base_url=url, timeout=timeout) as client:
            yield client
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        raise Refused(EX_USAGE, f"--url {url!r} is not a usable URL: {exc}") from exc
    except httpx.HTTPError as exc:
        raise Refused(EX_UNAVAILABLE, f"cannot reach the service at {url}: {exc!r}") from exc


def _ask(http: httpx.Client, api_key: str, body: Mapping[str, Any]) -> Answer:
    response = http.post(
        "/v1/execute",
        json={k: v for k, v in body.items() if v is not None},
        # Profile A answers every decision with 200; a profile B answer (403/422 with a
        # receipt body) is accepted below too, so neither org setting breaks gate.
        headers={"Authorization": f"Bearer {api_key}", "Prefer": "wire=a"},
    )
    try:
        document = json.loads(response.content, object_pairs_hook=_unique_keys)
    except ValueError as exc:
        if response.is_success:
            raise Refused(EX_DATAERR, f"the answer is not a JSON receipt: {exc}") from exc
        document = None
    if response.status_code in (200, 403, 422) and _is_receipt(document):
        return Answer(response.content, document)
    if response.is_success:
        raise Refused(EX_DATAERR, "the answer is not a receipt")
    raise Refused(EX_UNAVAILABLE, "the service answered " + _describe_error(response, document))


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Refuse duplicate names: the command must not read other values than were verified."""
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise ValueError(f"duplicate field {key!r}")
        document[key] = value
    return document


def _is_receipt(document: object) -> bool:
    return isinstance(document, dict) and "decision" in document and "signature" in document


def _describe_error(response: httpx.Response, document: object) -> str:
    """``401 unauthorized: message`` from a flat (profile A) or nested (B) error body."""
    fields: Mapping[str, Any] = {}
    if isinstance(document, dict):
        error = document.get("error")
        fields = error if isinstance(error, dict) else {"code": error, **document}
    code = fields.get("code") or response.reason_phrase
    message = fields.get("message") or response.text[:200]
    return f"{response.status_code} {code}: {message}"


def _fetch_keys(http: httpx.Client) -> KeyList:
    response = http.get(KEYS_PATH)
    if response.is_error:
        raise Refused(EX_UNAVAILABLE, f"{KEYS_PATH} answered {response.status_code}")
    try:
        return KeyList(*parse_key_list(response.json()))
    except (ValueError, KeyListError, AttributeError) as exc:
        raise Refused(EX_UNAVAILABLE, f"{KEYS_PATH} is not a key list: {exc}") from exc


def _check(answer: Answer, key_list: KeyList, expected: ExecuteRequest) -> None:
    """Authentic, about exactly the request sent, and (for a PERMIT) unexpired — or 65."""
    receipt = answer.receipt
    verdict = verify_receipt(receipt, key_list.keys, now=datetime.now(UTC), issuer=key_list.issuer)
    if not verdict.authentic:
        raise Refused(
            EX_DATAERR,
            f"receipt {answer.receipt_id} fails verification: {verdict.reason}: {verdict.detail}",
        )
    # The fresh idempotency key (request_id) binds the receipt to this run: an older
    # authentic PERMIT for the same request, replayed by whoever sits in between, fails.
    problems = unmet_expectations(
        receipt,
        surface=expected.surface,
        actor=expected.actor,
        request_digest=expected.digest,
        request_id=expected.idempotency_key,
    )
    if problems:
        raise Refused(
            EX_DATAERR,
            f"receipt {answer.receipt_id} does not match the request: " + "; ".join(problems),
        )
    if verdict.expired:
        raise Refused(
            EX_DATAERR,
            f"PERMIT {answer.receipt_id} expired at {receipt.get('expires_at')} "
            "(check this machine's clock)",
        )


def _describe_block(answer: Answer) -> str:
    receipt = answer.receipt
    why = receipt.get("reasonCode") or receipt.get("reason_code") or "no reason given"
    message = receipt.get("message")
    return f"{answer.decision} {answer.receipt_id}: {why}" + (f": {message}" if message else "")


def _write(path: Path, raw: bytes) -> None:
    try:
        path.write_bytes(raw)
    except OSError as exc:
        raise Refused(EX_USAGE, f"cannot write the receipt to {path}: {exc}") from exc


@contextmanager
def _receipt_path(chosen: Path | None, raw: bytes) -> Iterator[Path]:
    """``chosen`` (already written), or a private 0600 temporary file removed afterwards."""
    if chosen is not None:
        yield chosen.resolve()
        return
    fd, name = tempfile.mkstemp(prefix="execauth-receipt-", suffix=".json")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)


def _run(command: Sequence[str], receipt_path: Path, receipt_id: str) -> int:
    """Run ``command`` with gate's stdio; its exit status, or 128+N if signal N ended it."""
    # A receipt authorizes this one command; the key to ask for more stays with gate.
    env = {k: v for k, v in os.environ.items() if k != API_KEY_ENV}
    env |= {RECEIPT_FILE_ENV: str(receipt_path), RECEIPT_ID_ENV: receipt_id}
    try:
        process = subprocess.Popen(list(command), env=env)  # noqa: S603 - the user's command
    except OSError as exc:
        raise Refused(EX_USAGE, f"cannot start {command[0]}: {exc}") from exc
    with _signals_go_to(process):
        status = process.wait()
    return 128 - status if status < 0 else status


@contextmanager
def _signals_go_to(process: subprocess.Popen[bytes]) -> Iterator[None]:
    """While ``process`` runs: relay SIGTERM/SIGHUP to it and ignore SIGINT.

    Ctrl-C at a terminal already reaches the command (same process group); relaying it
    again would be a second interrupt, which some tools (terraform) treat as "abort now".
    Installed after the start, so the command does not inherit SIGINT as ignored.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def relay(signum: int, _frame: FrameType | None) -> None:
        process.send_signal(signum)

    previous = {sig: signal.signal(sig, relay) for sig in FORWARDED_SIGNALS}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
