"""Heavy work in a thread gives the GIL back to the event loop at a steady rhythm.

A replay or impact analysis runs in a worker thread of a serving process. A CPU-bound
thread takes the GIL from the event loop for whole switch intervals (5 ms) each time the
loop wants it back, and holds it most of the time: measured, two such threads made
``/v1/execute`` wait over a second. ``Pacer`` bounds the thread's share instead: after
``work_seconds`` of work it sleeps ``rest_seconds`` (the GIL released), so the event
loop waits at most about one work slice for the GIL and gets at least the rest share
of it (docs/decisions.md, "Operator work cannot starve decisions"). Heavy work takes
about twice as long; decisions do not wait for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Pacer:
    def __init__(
        self,
        *,
        work_seconds: float = 0.002,
        rest_seconds: float = 0.002,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._work = work_seconds
        self._rest = rest_seconds
        self._clock = clock
        self._sleep = sleep
        self._since = clock()

    def __call__(self) -> None:
        """Call once per unit of heavy work (a record); sleeps when the slice is used up."""
        if self._clock() - self._since >= self._work:
            self._sleep(self._rest)
            self._since = self._clock()
