"""Process logs and process names: one logging configuration for every execauth process.

Every process of ``execauth serve`` (the supervisor, each gateway worker, the writer)
writes its logs, uvicorn's included, as one JSON object per line on stderr: ``time``,
``level``, ``logger``, ``process`` (the role below), ``pid``, ``message`` and, for an
exception, ``exception`` (its traceback as text). On a terminal they are text instead
(``EXECAUTH_LOG_FORMAT=auto|json|text``). The decision log (``execauth.observability.decision_log``)
is a logger of its own, ``execauth.decisions``, whose lines go where
``EXECAUTH_DECISION_LOG`` says and never mix with the process logs' level.

uvicorn is given ``logging_config`` as its ``log_config`` rather than its default, so
its workers, which configure logging again in each spawned interpreter, log alike.

``name_process`` sets what ``ps`` shows (``execauth: gateway 1/2``) through
``setproctitle`` (docs/decisions.md) and the ``process`` field of every line.
"""

from __future__ import annotations

import fcntl
import logging
import logging.config
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

import msgspec
import setproctitle

from execauth.config import Settings

DECISION_LOGGER = "execauth.decisions"
# Where the decision log goes besides a file path.
DECISION_STREAMS = {"stderr": "ext://sys.stderr", "stdout": "ext://sys.stdout"}

# The role of this process; "execauth" until name_process names it (a CLI command).
_process_name = "execauth"
_held_slots: list[int] = []
_formatted_second: list[Any] = [-1, ""]


def name_process(role: str) -> None:
    """Call at a process's start: ``ps`` and every log line then name its role."""
    global _process_name
    _process_name = role
    setproctitle.setproctitle(f"execauth: {role}")


def process_name() -> str:
    return _process_name


def claim_worker_slot(directory: str) -> int:
    """The lowest free worker number (1, 2, …) under ``directory``, held until this process ends.

    Each number is a lock file; the kernel releases a dead worker's lock, so the worker
    uvicorn starts in its place takes its number again (``ps``: ``gateway 2/4``).
    """
    slot = 1
    while True:
        fd = os.open(os.path.join(directory, f"worker-{slot}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            slot += 1
            continue
        _held_slots.append(fd)  # kept open: closing it would release the number
        return slot


def format_time(created: float) -> str:
    """RFC 3339 in UTC to the millisecond, as receipts write time (``2025-01-02T03:04:05.678Z``)."""
    # Whole milliseconds first: 10.001 s is 10.000999… in binary, not 10 s and 0 ms.
    seconds, millis = divmod(round(created * 1000), 1000)
    cached_second, prefix = _formatted_second
    if seconds != cached_second:  # strftime once a second, not once a line
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _formatted_second[:] = [seconds, prefix]
    return f"{prefix}.{millis:03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per record; the message is formatted, never the raw arguments."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": format_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "process": _process_name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return msgspec.json.encode(entry).decode()


class TextFormatter(logging.Formatter):
    """For a person at a terminal: ``time level process logger: message``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s [%(execauth_process)s] %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.execauth_process = _process_name
        return super().format(record)


class DecisionJsonFormatter(logging.Formatter):
    """A decision record carries its fields as a mapping (``decision_log``): one JSON line.

    Anything else logged to ``execauth.decisions`` is written as a process log line.
    """

    _fallback = JsonFormatter()

    def format(self, record: logging.LogRecord) -> str:
        if isinstance(record.msg, Mapping):
            return msgspec.json.encode(record.msg).decode()
        return self._fallback.format(record)


class DecisionLineHandler(logging.Handler):
    """The decision log's JSON destination: a stream, or a file appended to by every process.

    ``write_fields`` is the decision log's own door (``DecisionLog.record``): one line
    encoded and written, without the ``LogRecord``, filters and formatter a logged
    record goes through (a line to a file cost 25 µs through them, 10–14 µs this way;
    docs/performance.md, "The per-decision round"). Anything else logged to
    ``execauth.decisions`` goes through ``emit`` and its formatter, as with any handler.

    A file is opened ``O_APPEND`` and each line is one ``write``, so the workers of
    ``serve --workers N`` share it line by line. After ``logrotate`` moves the file it is
    reopened, like ``WatchedFileHandler`` does, but the path is checked at most once per
    ``REOPEN_CHECK_SECONDS`` instead of before every line: a line written in that second
    goes to the moved file, where it is kept.
    """

    REOPEN_CHECK_SECONDS = 1.0

    def __init__(
        self,
        stream: TextIO | None = None,
        filename: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        if (stream is None) == (filename is None):
            raise ValueError("a decision line handler writes to a stream or to a file")
        self._stream = stream
        self._filename = filename
        self._clock = clock
        self._fd = -1
        self._identity = (0, 0)
        self._checked_at = 0.0
        self._write_lock = threading.Lock()  # a reopen and a write are not interleaved
        if filename is not None:
            self._open()

    def write_fields(self, fields: Mapping[str, Any]) -> None:
        self._write(msgspec.json.encode(fields) + b"\n")

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._write(self.format(record).encode() + b"\n")
        except Exception:  # noqa: BLE001 - a handler reports its failure, as logging's own do
            self.handleError(record)

    def close(self) -> None:
        with self._write_lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
        super().close()

    def _write(self, line: bytes) -> None:
        with self._write_lock:
            if self._stream is not None:
                self._stream.write(line.decode())
                self._stream.flush()
                return
            now = self._clock()
            if now - self._checked_at >= self.REOPEN_CHECK_SECONDS:
                self._checked_at = now
                self._reopen_if_moved()
            written = os.write(self._fd, line)
            while written < len(line):  # a short write (a signal, a full disk) goes on
                line = line[written:]
                written = os.write(self._fd, line)

    def _open(self) -> None:
        assert self._filename is not None
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        self._fd = os.open(self._filename, flags, 0o666)
        stat = os.fstat(self._fd)
        self._identity = (stat.st_dev, stat.st_ino)

    def _reopen_if_moved(self) -> None:
        assert self._filename is not None
        try:
            stat = os.stat(self._filename)
            identity = (stat.st_dev, stat.st_ino)
        except FileNotFoundError:
            identity = (0, 0)
        if identity != self._identity:
            os.close(self._fd)
            self._open()


class DecisionTextFormatter(logging.Formatter):
    """``time DECISION key=value …`` for a terminal; values that are objects as JSON."""

    _fallback = TextFormatter()

    def format(self, record: logging.LogRecord) -> str:
        fields = record.msg
        if not isinstance(fields, Mapping):
            return self._fallback.format(record)
        parts = [str(fields.get("time", format_time(record.created))), str(fields.get("event"))]
        for name, value in fields.items():
            if name in ("time", "event", "logger"):
                continue
            shown = value if isinstance(value, str) else msgspec.json.encode(value).decode()
            parts.append(f"{name}={shown}")
        return " ".join(parts)


def _is_terminal(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except ValueError:  # a closed stream
        return False


def uses_text(settings: Settings, stream: TextIO | None) -> bool:
    """Text for ``stream`` when asked, or under ``auto`` when it is a terminal."""
    if settings.log_format == "auto":
        return _is_terminal(stream)
    return settings.log_format == "text"


def logging_config(settings: Settings) -> dict[str, Any]:
    """The ``logging.config.dictConfig`` of every execauth process, uvicorn's included."""
    level = settings.log_level.upper()
    text = uses_text(settings, sys.stderr)
    destination = settings.decision_log
    handlers: dict[str, dict[str, Any]] = {
        "process": {
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stderr",
            "formatter": "text" if text else "json",
        }
    }
    if destination == "off":
        handlers["decisions"] = {"class": "logging.NullHandler"}
    elif destination in DECISION_STREAMS:
        stream = sys.stderr if destination == "stderr" else sys.stdout
        if uses_text(settings, stream):  # a person reads it: through the text formatter
            handlers["decisions"] = {
                "class": "logging.StreamHandler",
                "stream": DECISION_STREAMS[destination],
                "formatter": "decision_text",
            }
        else:
            handlers["decisions"] = {
                "()": DecisionLineHandler,
                "stream": DECISION_STREAMS[destination],
                "formatter": "decision_json",
            }
    else:
        # A path: always JSON, appended line by line and reopened after logrotate
        # moves it (DecisionLineHandler), so the workers can share it.
        handlers["decisions"] = {
            "()": DecisionLineHandler,
            "filename": destination,
            "formatter": "decision_json",
        }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "json": {"()": JsonFormatter},
            "text": {"()": TextFormatter},
            "decision_json": {"()": DecisionJsonFormatter},
            "decision_text": {"()": DecisionTextFormatter},
        },
        "handlers": handlers,
        "loggers": {
            # uvicorn's own loggers carry handlers in its default configuration; here
            # they have none and reach the root's, like every other logger.
            "uvicorn": {"level": level, "handlers": [], "propagate": True},
            "uvicorn.error": {"level": level, "handlers": [], "propagate": True},
            "uvicorn.access": {
                "level": level if settings.access_log else "CRITICAL",
                "handlers": [],
                "propagate": settings.access_log,
            },
            # Each worker imports alembic, which announces its plugins at INFO: noise.
            "alembic.runtime.plugins": {"level": "WARNING"},
            # Its own level: a decision line is a record of the service's work, not a
            # diagnostic, so EXECAUTH_LOG_LEVEL=warning does not silence it; "off" does.
            DECISION_LOGGER: {
                "level": "CRITICAL" if destination == "off" else "INFO",
                "handlers": ["decisions"],
                "propagate": False,
            },
        },
        "root": {"level": level, "handlers": ["process"]},
    }


def setup_logging(settings: Settings) -> None:
    """Configure this process's logging (each spawned process calls it, or uvicorn does)."""
    logging.config.dictConfig(logging_config(settings))
    logging.captureWarnings(True)  # warnings.warn(...) as log lines too, not bare stderr text
