"""A child process of the serving topology: started, restarted if it dies, stopped.

The writer process (``serving/writer_process.py``) and the log keeper process
(``serving/log_keeper.py``) are both watched this way by the process that started them.
"""

from __future__ import annotations

import logging
import threading
from multiprocessing.process import BaseProcess

log = logging.getLogger("execauth.serving")
WATCH_INTERVAL_SECONDS = 0.5


class SupervisedProcess:
    """Start with ``start``; a process that dies is started again (its ``role`` names it
    in the log); ``stop`` sends SIGTERM and, after ``stop_seconds``, SIGKILL.

    A subclass's ``_spawn`` starts the process, sets ``_process``, and returns once it is
    ready (or raises; the watcher then tries again).
    """

    def __init__(self, role: str, *, stop_seconds: float) -> None:
        self.role = role
        self._stop_seconds = stop_seconds
        self._process: BaseProcess | None = None
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None

    def start(self) -> None:
        self._spawn()
        self._watcher = threading.Thread(target=self._watch, name=f"{self.role}-watch", daemon=True)
        self._watcher.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.join()  # no restart from here on
        process = self._process
        if process is None:
            return
        if process.is_alive():
            process.terminate()  # SIGTERM: the process finishes what it holds, then exits
            process.join(self._stop_seconds)
        if process.is_alive():
            log.error("the %s process did not stop; killing it", self.role)
            process.kill()
            process.join()

    def _spawn(self) -> None:
        raise NotImplementedError

    def _watch(self) -> None:
        while not self._stopping.wait(WATCH_INTERVAL_SECONDS):
            process = self._process
            if process is None or process.is_alive():
                continue
            log.error(
                "the %s process exited with code %s; restarting it", self.role, process.exitcode
            )
            try:
                self._spawn()
            except Exception:
                log.exception("restarting the %s process failed; will retry", self.role)
