"""gate while it waits: the progress it shows (injected clock), --approval-timeout parsing."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from execauth.cli import app
from execauth.cli.gate import EX_USAGE, Progress, Refused, _approval_timeout

APPROVAL_ID = "service_appr_01M85ZZZZZZZZZZZZZZZZZZZZZ"


class Stream(io.StringIO):
    def __init__(self, *, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_without_a_terminal_each_poll_prints_a_plain_line_with_approvals_and_time() -> None:
    stream, clock = Stream(tty=False), Clock()
    progress = Progress(APPROVAL_ID, 900, 2, stream=stream, clock=clock)
    clock.now += 30
    progress.update(1)
    lines = stream.getvalue().splitlines()
    assert lines[-1] == (
        f"execauth gate: approval {APPROVAL_ID} pending: 1/2 approvals, 30s elapsed, 14m30s left"
    )
    assert "\r" not in stream.getvalue()


def test_on_a_terminal_one_line_is_redrawn_and_cleared_when_waiting_ends() -> None:
    stream, clock = Stream(tty=True), Clock()
    progress = Progress(APPROVAL_ID, 3720, 1, stream=stream, clock=clock)
    progress.close()
    shown = stream.getvalue()
    assert f"\r\x1b[Kexecauth gate: approval {APPROVAL_ID} pending: 0/1 approvals" in shown
    assert "1h02m00s left" in shown
    assert shown.endswith("\r\x1b[K")  # the redrawn line does not stay behind


def test_approval_timeout_reads_durations_like_the_policy_and_plain_seconds() -> None:
    assert _approval_timeout("15m") == 900
    assert _approval_timeout("1h30m") == 5400
    assert _approval_timeout("90") == 90


def test_approval_timeout_below_a_second_or_not_a_duration_is_a_usage_error() -> None:
    for raw in ("0", "0s", "soon", "15x", "nan", ""):
        with pytest.raises(Refused) as refused:
            _approval_timeout(raw)
        assert refused.value.status == EX_USAGE, raw


def test_observe_with_approval_timeout_is_a_usage_error_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    result = CliRunner().invoke(
        app,
        ["gate", "--surface", "deploy.production", "--observe", "--approval-timeout", "1m",
         "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
        env={"EXECAUTH_API_KEY": "service_live_unused", "EXECAUTH_URL": "http://127.0.0.1:9"},
    )  # fmt: skip
    assert result.exit_code == EX_USAGE, result.stderr
    assert not marker.exists()
