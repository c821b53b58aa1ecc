"""The process log formats (execauth/observability/logs.py): JSON lines with the exception
text, text for a terminal, and the decision log's destinations as a fresh process
configures them."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from execauth.config import Settings
from execauth.observability.logs import (
    DecisionTextFormatter,
    JsonFormatter,
    TextFormatter,
    claim_worker_slot,
    format_time,
    uses_text,
)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def record(message: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    made = logging.LogRecord("execauth.test", logging.ERROR, __file__, 1, message, args, info)
    made.created = 86_400.5
    return made


def test_a_json_line_has_the_fields_and_the_formatted_message() -> None:
    line = msgspec.json.decode(JsonFormatter().format(record("took %d ms", 12)))
    assert {k: line[k] for k in ("time", "level", "logger", "message")} == {
        "time": "1970-01-02T00:00:00.500Z",
        "level": "ERROR",
        "logger": "execauth.test",
        "message": "took 12 ms",
    }
    assert {"process", "pid"} <= set(line)


def test_an_exception_is_one_json_line_holding_its_traceback() -> None:
    try:
        raise ValueError("bad value\nsecond line")
    except ValueError as exc:
        text = JsonFormatter().format(record("failed", exc=exc))
    assert "\n" not in text
    line = msgspec.json.decode(text)
    assert "Traceback" in line["exception"]
    assert "ValueError: bad value" in line["exception"]


def test_the_text_format_names_level_process_and_logger() -> None:
    text = TextFormatter().format(record("hello"))
    assert "ERROR" in text
    assert "[execauth] execauth.test: hello" in text


def test_a_decision_in_text_is_key_value_pairs() -> None:
    fields = {"time": "T", "logger": "execauth.decisions", "event": "decision", "status": 200,
              "decision": "PERMIT", "context": {"a": 1}}  # fmt: skip
    made = logging.LogRecord("execauth.decisions", logging.INFO, "", 0, fields, (), None)
    assert DecisionTextFormatter().format(made) == (
        'T decision status=200 decision=PERMIT context={"a":1}'
    )


@pytest.mark.parametrize(
    ("log_format", "terminal", "text"),
    [
        ("auto", True, True),
        ("auto", False, False),
        ("json", True, False),
        ("text", False, True),
    ],
)
def test_auto_is_text_only_on_a_terminal(log_format: str, terminal: bool, text: bool) -> None:
    stream = Terminal() if terminal else io.StringIO()
    assert uses_text(Settings.model_validate({"log_format": log_format}), stream) is text


def test_times_within_one_second_share_its_prefix_and_keep_their_milliseconds() -> None:
    assert [format_time(10.001), format_time(10.999), format_time(11.0)] == [
        "1970-01-01T00:00:10.001Z",
        "1970-01-01T00:00:10.999Z",
        "1970-01-01T00:00:11.000Z",
    ]


def test_worker_slots_are_the_lowest_free_numbers(tmp_path: Path) -> None:
    # Held by this process until it ends, like a worker's; a second claim takes the next.
    assert (claim_worker_slot(str(tmp_path)), claim_worker_slot(str(tmp_path))) == (1, 2)


DECISION_LOG_ENABLED = textwrap.dedent(
    """
    import logging, sys
    from execauth.config import Settings
    from execauth.observability.logs import DECISION_LOGGER, setup_logging
    setup_logging(Settings(decision_log=sys.argv[1]))
    print(logging.getLogger(DECISION_LOGGER).isEnabledFor(logging.INFO))
    """
)


@pytest.mark.parametrize(("destination", "enabled"), [("off", "False"), ("stdout", "True")])
def test_off_disables_the_decision_logger(destination: str, enabled: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", DECISION_LOG_ENABLED, destination],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == enabled


def test_a_warning_level_keeps_decision_lines(tmp_path: Path) -> None:
    target = tmp_path / "decisions.jsonl"
    script = textwrap.dedent(
        """
        import logging, sys
        from execauth.config import Settings
        from execauth.observability.logs import DECISION_LOGGER, setup_logging
        setup_logging(Settings(decision_log=sys.argv[1], log_level="warning"))
        logging.getLogger(DECISION_LOGGER).info({"event": "decision"})
        logging.getLogger("execauth.other").info("not at warning")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(target)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert target.read_text() == '{"event":"decision"}\n'
    assert done.stderr == ""
