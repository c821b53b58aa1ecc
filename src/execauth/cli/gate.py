"""``execauth gate``: run a command only under a verified PERMIT for exactly this request.

``execauth gate --surface S [--actor A] [--context k=v ...] -- COMMAND ARGS...`` asks the
service for a decision, verifies the receipt offline (``execauth.verify``) against the
service's published keys or a pinned ``--keys`` file, checks that it is an unexpired
PERMIT for the request it sent, and only then runs the command with the receipt's path
and id in its environment. Every other outcome, any error included, leaves the command
unrun: the only ``subprocess`` call sits behind the last check (``--observe`` excepted,
which runs the command whatever the answer and says so loudly: never where it matters).

On ESCALATE, ``--approval-timeout`` waits for the people the policy names: it follows
``GET /v1/approvals/{id}?wait=`` (server-side long-polls) with progress on stderr, and
the linked outcome receipt goes through the same checks as a first answer, plus its
link to the ESCALATE that was verified before.

Exit status (sysexits where one fits; docs/approvals.md): the command's own status when
it ran (128+N when signal N ended it); otherwise 77 on DENY (and on ESCALATE when not
waiting), 79 when an approver rejected, 80 when the approval expired, 81 when it is still
pending at ``--approval-timeout``, 130 on Ctrl-C before the command ran, 75 on SILENCE,
69 when the service is unreachable or answered an error, 65 when a receipt fails
verification or does not match the request (an expired PERMIT included), 82 when the
PERMIT's ``allowed_commands`` (a bound grant, docs/receipts.md "Constraints") does not
name the command, 2 on a usage error.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, TextIO

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
# No sysexits code means "a person said no" or "nobody answered in time"; these sit just
# above the sysexits range so a pipeline can tell them from a policy DENY (77).
EX_REJECTED, EX_EXPIRED, EX_PENDING = 79, 80, 81
EX_INTERRUPTED = 128 + signal.SIGINT  # the shell's status for Ctrl-C
DECISION_STATUS = {"DENY": EX_NOPERM, "SILENCE": EX_TEMPFAIL, "ESCALATE": EX_NOPERM}
APPROVAL_OUTCOME_STATUS = {"rejected": EX_REJECTED, "expired": EX_EXPIRED}

APPROVALS_PATH = "/v1/approvals/"
# One long-poll holds at most this long (the server allows 60 s): short enough for a
# progress line every half minute in a CI log, long enough to cost next to nothing.
POLL_SECONDS = 30
# Consecutive failed polls (network, 429, 5xx) tolerated while waiting; a blip must not
# end a 15-minute wait, a service that stays away must.
MAX_POLL_FAILURES = 3
RETRYABLE_POLL_STATUS = frozenset({429, 500, 502, 503, 504})
DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?\Z")

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
    approval_timeout: Annotated[
        str | None,
        typer.Option(
            help="On ESCALATE, wait this long (15m, 1h30m, 90s) for the approval, with "
            "progress on stderr; run COMMAND if it is approved. Default: do not wait (77).",
            show_default=False,
        ),
    ] = None,
    observe: Annotated[
        bool,
        typer.Option(
            "--observe",
            help="Record the decision (printed, and in --receipt-file) and run COMMAND "
            "WHATEVER IT IS: for rolling a policy out. Never where enforcement matters.",
        ),
    ] = False,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Run COMMAND only under a verified, unexpired PERMIT for exactly this request.

    The API key comes from EXECAUTH_API_KEY, never from a flag.

    COMMAND gets EXECAUTH_RECEIPT_FILE and EXECAUTH_RECEIPT_ID, not the API key.

    Exit status: COMMAND's own if it ran; else 77 DENY (and ESCALATE without
    --approval-timeout), 79 approval rejected, 80 approval expired, 81 approval still
    pending at --approval-timeout, 130 interrupted, 75 SILENCE, 69 service unreachable
    or error, 65 receipt not verified or not for this request, 2 usage error.
    With --observe: COMMAND's own, whatever the decision.
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
            approval_timeout=_approval_timeout(approval_timeout),
            observe=observe,
            url=url.rstrip("/"),
        )
    except Refused as refused:
        typer.echo(f"execauth gate: {refused.reason}; not running {name}", err=True)
        raise typer.Exit(refused.status) from None
    raise typer.Exit(status)


def _approval_timeout(raw: str | None) -> float | None:
    """``--approval-timeout`` in seconds (``15m``, ``1h30m``, ``90s`` or a number)."""
    if raw is None:
        return None
    seconds: float | None = None
    if (match := DURATION.match(raw.strip())) and any(match.groups()):
        h, m, s = (int(g) if g else 0 for g in match.groups())
        seconds = h * 3600 + m * 60 + s
    else:
        try:
            seconds = float(raw)
        except ValueError:
            seconds = None
    if seconds is None or not math.isfinite(seconds) or seconds < 1:
        raise Refused(
            EX_USAGE, f"--approval-timeout {raw!r} is not a duration of 1s or more (e.g. 15m)"
        )
    return seconds


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
    approval_timeout: float | None,
    observe: bool,
    url: str,
) -> int:
    # Everything the caller can get wrong is checked before a decision is spent on it.
    if not command:
        raise Refused(EX_USAGE, "no command given (put it after --)")
    if observe and approval_timeout is not None:
        raise Refused(EX_USAGE, "--observe runs the command at once; --approval-timeout waits")
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

    try:
        answer = _decide(
            url, timeout, api_key, body, expected, pinned, receipt_file, approval_timeout
        )
    except Refused as refused:
        # Observing never overrides the caller: a usage error or Ctrl-C still stops here.
        if not observe or refused.status in (EX_USAGE, EX_INTERRUPTED):
            raise
        return _observed(command, f"no usable decision ({refused.reason})")
    if answer.decision != "PERMIT":
        if observe:
            return _observed(command, _describe_block(answer))
        raise Refused(
            _status_for(answer, waited=approval_timeout is not None), _describe_block(answer)
        )

    # A bound grant (docs/receipts.md, "Constraints"): only a command the PERMIT's
    # allowed_commands names runs; else exit 82, its own status (--observe: runs, loudly).
    from execauth.verify import command_outside_grant

    if (outside := command_outside_grant(answer.receipt, command)) is not None:
        if observe:
            return _observed(command, outside)
        raise Refused(82, f"PERMIT {answer.receipt_id}: {outside}")
    typer.echo(
        f"execauth gate: PERMIT {answer.receipt_id} (policy {answer.receipt.get('policy_id')} "
        f"rule {answer.receipt.get('rule_id')}, until {answer.receipt.get('expires_at')})"
        + _approved_by(answer)
        + f"; running {command[0]}",
        err=True,
    )
    with _receipt_path(receipt_file, answer.raw) as path:
        return _run(command, (path, answer.receipt_id))


def _decide(
    url: str,
    timeout: float,
    api_key: str,
    body: Mapping[str, Any],
    expected: ExecuteRequest,
    pinned: KeyList | None,
    receipt_file: Path | None,
    approval_timeout: float | None,
) -> Answer:
    """The verified answer to run (or not run) the command on; waits on ESCALATE if asked.

    Ctrl-C anywhere before the command starts is a refusal like any other (130).
    """
    try:
        with _http(url, timeout) as http:
            answer = _ask(http, api_key, body)
            key_list = pinned if pinned is not None else _fetch_keys(http)
            _check(answer, key_list, expected)
            if receipt_file is not None:
                _write(receipt_file, answer.raw)
            if answer.decision != "ESCALATE" or approval_timeout is None:
                return answer
            escalation = answer
            answer = _await_approval(http, api_key, escalation, approval_timeout, timeout)
            if answer is escalation:
                raise Refused(EX_PENDING, _still_pending(escalation, approval_timeout, body))
            if pinned is None and answer.receipt.get("key_id") not in key_list.keys:
                key_list = _fetch_keys(http)  # a key rotation while people decided
        _check(answer, key_list, expected)
        _check_link(answer, escalation)
    except KeyboardInterrupt:
        raise Refused(EX_INTERRUPTED, "interrupted before the command ran") from None
    if receipt_file is not None:
        _write(receipt_file, answer.raw)
    return answer


def _status_for(answer: Answer, *, waited: bool) -> int:
    outcome = answer.receipt.get("approval_outcome")
    if answer.decision == "DENY" and outcome in APPROVAL_OUTCOME_STATUS:
        return APPROVAL_OUTCOME_STATUS[str(outcome)]
    if answer.decision == "ESCALATE" and waited:
        return EX_PENDING
    return DECISION_STATUS.get(answer.decision, EX_NOPERM)


def _still_pending(escalation: Answer, waited: float, body: Mapping[str, Any]) -> str:
    return (
        f"approval {escalation.receipt.get('approval_id')} still pending after "
        f"{_clock(waited)} (it stays open until {escalation.receipt.get('approval_expires_at')}; "
        f"run gate again with --idempotency-key {body['idempotency_key']} to keep waiting)"
    )


def _observed(command: Sequence[str], what: str) -> int:
    """``--observe``: say loudly that the command runs without permission, then run it."""
    typer.echo(
        f"execauth gate: OBSERVE MODE, NOT ENFORCED: {what}; running {command[0]} "
        "WITHOUT PERMISSION",
        err=True,
    )
    # No receipt in its environment: a command that looks for one must not take a DENY
    # (or nothing) for a permission.
    return _run(command, None)


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


def _check_link(outcome: Answer, escalation: Answer) -> None:
    """The outcome must name the ESCALATE gate verified: else it answers another request."""
    linked = outcome.receipt.get("approval_id") == escalation.receipt.get(
        "approval_id"
    ) and outcome.receipt.get("escalation_receipt_id") == escalation.receipt.get("receipt_id")
    if not linked:
        raise Refused(
            EX_DATAERR,
            f"receipt {outcome.receipt_id} is not the outcome of ESCALATE "
            f"{escalation.receipt_id} (approval {escalation.receipt.get('approval_id')})",
        )


def _await_approval(
    http: httpx.Client, api_key: str, escalation: Answer, budget: float, timeout: float
) -> Answer:
    """The outcome receipt of ``escalation``'s approval, or ``escalation`` itself if the
    budget ran out while it was pending. Nothing here is trusted before ``_check``.

    The approval is followed on the service gate asked (``--url``), never at the
    receipt's ``approval_url``: the API key must not go wherever a receipt points.
    """
    approval_id = str(escalation.receipt.get("approval_id", ""))
    if not re.fullmatch(r"service_appr_[0-9A-Za-z]{26}", approval_id):
        raise Refused(EX_DATAERR, f"ESCALATE {escalation.receipt_id} has no usable approval_id")
    quorum = escalation.receipt.get("approval_quorum")
    progress = Progress(approval_id, budget, quorum if isinstance(quorum, int) else None)
    failures = 0
    try:
        while (remaining := progress.remaining()) > 0:
            wait = max(1, min(POLL_SECONDS, math.ceil(remaining)))
            try:
                response = http.get(
                    APPROVALS_PATH + approval_id,
                    params={"wait": f"{wait}s"},
                    headers={"Authorization": f"Bearer {api_key}"},
                    timeout=wait + timeout,
                )
            except httpx.TransportError as exc:
                failures = _poll_failed(failures, progress, repr(exc))
                continue
            if response.status_code in RETRYABLE_POLL_STATUS:
                failures = _poll_failed(failures, progress, f"HTTP {response.status_code}")
                continue
            failures = 0
            state, approvals, outcome = _approval_state(response)
            if outcome is not None:
                progress.finish(f"approval {approval_id} {state}")
                return outcome
            if state != "pending":
                raise Refused(EX_DATAERR, f"approval {approval_id} is {state} with no outcome")
            progress.update(approvals)
        progress.finish(f"stopped waiting for approval {approval_id}")
        return escalation
    finally:
        progress.close()


def _poll_failed(failures: int, progress: Progress, what: str) -> int:
    """Count a failed poll; give up (69) after MAX_POLL_FAILURES in a row, else back off."""
    failures += 1
    if failures >= MAX_POLL_FAILURES:
        raise Refused(
            EX_UNAVAILABLE, f"lost the service while waiting for approval ({what}, {failures}x)"
        )
    progress.note(f"poll failed ({what}); retrying")
    time.sleep(min(2.0**failures, max(progress.remaining(), 0.0)))
    return failures


def _approval_state(response: httpx.Response) -> tuple[str, int | None, Answer | None]:
    """(state, approvals so far, the outcome receipt if any) from ``GET /v1/approvals/{id}``."""
    if response.is_error:
        try:
            document = response.json()
        except ValueError:
            document = None
        raise Refused(EX_UNAVAILABLE, "the service answered " + _describe_error(response, document))
    try:
        document = json.loads(response.content, object_pairs_hook=_unique_keys)
    except ValueError as exc:
        raise Refused(EX_DATAERR, f"the approval is not JSON: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("state"), str):
        raise Refused(EX_DATAERR, "the answer is not an approval")
    approvals = document.get("approvals")
    count = approvals if isinstance(approvals, int) else None
    outcome = document.get("outcome_receipt")
    if outcome is None:
        return document["state"], count, None
    if not _is_receipt(outcome):
        raise Refused(EX_DATAERR, "the approval's outcome is not a receipt")
    # The command gets these bytes; verification is over the canonical form, so
    # re-encoding the parsed receipt changes nothing that was signed.
    raw = json.dumps(outcome, ensure_ascii=False, separators=(",", ":")).encode()
    return document["state"], count, Answer(raw, outcome)


def _approved_by(answer: Answer) -> str:
    approvers = answer.receipt.get("approvers")
    if answer.receipt.get("approval_outcome") != "approved" or not isinstance(approvers, list):
        return ""
    names = [str(a.get("actor") or a.get("key_id")) for a in approvers if isinstance(a, dict)]
    return f", approved by {', '.join(names)}"


def _clock(seconds: float) -> str:
    """``1h02m03s`` / ``4m05s`` / ``9s``: durations people read in a log."""
    whole = max(0, int(seconds))
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m{s:02d}s"
    return f"{m}m{s:02d}s" if m else f"{s}s"


class Progress:
    """Waiting for approval, shown on stderr.

    On a terminal, one line redrawn every second (elapsed, left, approvals so far out
    of the quorum); otherwise a plain line per poll, which is what a CI log wants.
    """

    def __init__(
        self,
        approval_id: str,
        budget: float,
        quorum: int | None,
        *,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.approval_id = approval_id
        self.quorum = quorum
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.started = clock()
        self.deadline = self.started + budget
        self.approvals: int | None = 0
        self.tty = self.stream.isatty()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()  # the ticker thread and the poller share stderr
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._emit(
            f"execauth gate: ESCALATE: waiting up to {_clock(budget)} for approval "
            f"{approval_id} (Ctrl-C gives up; the command will not run)",
            line=True,
        )
        if self.tty:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        else:
            self._emit(self._status(), line=True)

    def remaining(self) -> float:
        return self.deadline - self.clock()

    def update(self, approvals: int | None) -> None:
        with self._lock:
            self.approvals = approvals
        if not self.tty:
            self._emit(self._status(), line=True)

    def note(self, what: str) -> None:
        self._emit(f"execauth gate: {what}", line=True)

    def finish(self, what: str) -> None:
        self.close()
        self._emit(f"execauth gate: {what} after {_clock(self.clock() - self.started)}", line=True)

    def close(self) -> None:
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            self._ticker = None
            self._emit("", line=False)  # clear the redrawn line

    def _status(self) -> str:
        with self._lock:
            approvals = "?" if self.approvals is None else str(self.approvals)
        quorum = "?" if self.quorum is None else str(self.quorum)
        elapsed = _clock(self.clock() - self.started)
        left = _clock(self.remaining())
        return (
            f"execauth gate: approval {self.approval_id} pending: {approvals}/{quorum} "
            f"approvals, {elapsed} elapsed, {left} left"
        )

    def _tick(self) -> None:
        while True:  # draws at least once, however soon the wait ends
            self._emit(self._status(), line=False)
            if self._stop.wait(1.0):
                return

    def _emit(self, text: str, *, line: bool) -> None:
        # On a terminal a line is cleared before printing (\r, erase to the end).
        prefix = "\r\x1b[K" if self.tty else ""
        with self._write_lock:
            self.stream.write(prefix + text + ("\n" if line else ""))
            self.stream.flush()


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


def _run(command: Sequence[str], receipt: tuple[Path, str] | None) -> int:
    """Run ``command`` with gate's stdio; its exit status, or 128+N if signal N ended it.

    ``receipt`` is the verified PERMIT's (path, id), ``None`` for an ``--observe`` run.
    """
    # A receipt authorizes this one command; the key to ask for more stays with gate.
    # Receipt variables from gate's own environment never pass through: only gate sets them.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (API_KEY_ENV, RECEIPT_FILE_ENV, RECEIPT_ID_ENV)
    }
    if receipt is not None:
        env |= {RECEIPT_FILE_ENV: str(receipt[0]), RECEIPT_ID_ENV: receipt[1]}
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
