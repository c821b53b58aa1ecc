"""The process log formats (execauth/observability/logs.py): JSON lines with the exception
text, text for a terminal, and the decision log's destinations as a fresh process
configures them."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from execauth.config import Settings
from execauth.observability.logs import (
    DecisionJsonFormatter,
    DecisionLineHandler,
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


# ---- the decision log's JSON destination -----------------------------------------------

FIELDS = {"time": "T", "logger": "execauth.decisions", "event": "decision", "status": 200}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_decision_line_is_the_json_formatter_s_line(tmp_path: Path) -> None:
    handler = DecisionLineHandler(filename=str(tmp_path / "decisions.jsonl"))
    handler.write_fields(FIELDS)
    handler.close()
    made = logging.LogRecord("execauth.decisions", logging.INFO, "", 0, FIELDS, (), None)
    expected = DecisionJsonFormatter().format(made) + "\n"
    assert (tmp_path / "decisions.jsonl").read_text() == expected


def test_a_file_moved_by_logrotate_is_reopened_within_the_check_interval(tmp_path: Path) -> None:
    path, clock = tmp_path / "decisions.jsonl", Clock()
    handler = DecisionLineHandler(filename=str(path), clock=clock)
    handler.write_fields({"n": 1})
    path.rename(tmp_path / "decisions.jsonl.1")
    handler.write_fields({"n": 2})  # within the second: still the moved file
    clock.now += DecisionLineHandler.REOPEN_CHECK_SECONDS
    handler.write_fields({"n": 3})
    handler.close()
    assert (tmp_path / "decisions.jsonl.1").read_text() == '{"n":1}\n{"n":2}\n'
    assert path.read_text() == '{"n":3}\n'


def test_a_decision_line_goes_to_a_stream_whole(tmp_path: Path) -> None:
    stream = io.StringIO()
    DecisionLineHandler(stream=stream).write_fields(FIELDS)
    assert [msgspec.json.decode(line) for line in stream.getvalue().splitlines()] == [FIELDS]


def test_a_message_logged_to_the_decision_logger_is_a_process_line(tmp_path: Path) -> None:
    stream = io.StringIO()
    handler = DecisionLineHandler(stream=stream)
    handler.setFormatter(DecisionJsonFormatter())
    handler.handle(record("not a decision"))
    assert msgspec.json.decode(stream.getvalue())["message"] == "not a decision"


def test_a_decision_line_handler_needs_one_destination() -> None:
    with pytest.raises(ValueError, match="a stream or to a file"):
        DecisionLineHandler()


def test_workers_sharing_the_file_append_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    first = DecisionLineHandler(filename=str(path))
    second = DecisionLineHandler(filename=str(path))
    for n in range(3):
        first.write_fields({"worker": 1, "n": n})
        second.write_fields({"worker": 2, "n": n})
    first.close()
    second.close()
    lines = [msgspec.json.decode(line) for line in path.read_text().splitlines()]
    assert [(line["worker"], line["n"]) for line in lines] == [
        (1, 0), (2, 0), (1, 1), (2, 1), (1, 2), (2, 2)
    ]  # fmt: skip


def test_a_configured_file_destination_takes_the_decision_log_s_lines(tmp_path: Path) -> None:
    target = tmp_path / "decisions.jsonl"
    script = textwrap.dedent(
        """
        import logging, sys
        from execauth.config import Settings
        from execauth.observability.decision_log import DecisionLog
        from execauth.observability.logs import DECISION_LOGGER, setup_logging
        setup_logging(Settings(decision_log=sys.argv[1]))
        handler, = logging.getLogger(DECISION_LOGGER).handlers
        print(type(handler).__name__)
        DecisionLog(trace_ids=lambda: None).record({"request_id": "req_1"}, None, KeyError(), 0.0)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(target)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "DecisionLineHandler"
    line = msgspec.json.decode(target.read_text())
    assert (line["request_id"], line["status"], line["exception"]) == ("req_1", 500, "KeyError")


def test_a_short_write_is_continued_to_the_line_s_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write

    def a_few_bytes_at_a_time(fd: int, data: bytes) -> int:
        return real_write(fd, data[:7])  # as a write interrupted by a signal returns

    handler = DecisionLineHandler(filename=str(tmp_path / "decisions.jsonl"))
    monkeypatch.setattr(os, "write", a_few_bytes_at_a_time)
    handler.write_fields(FIELDS)
    monkeypatch.undo()
    handler.close()
    assert msgspec.json.decode((tmp_path / "decisions.jsonl").read_text()) == FIELDS
