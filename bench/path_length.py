"""How long one execute's path is: the execauth modules it runs code in, and its calls.

    .venv/bin/python bench/path_length.py
    PYTHONPATH=/path/to/other/src .venv/bin/python bench/path_length.py   # another version

One ``POST /v1/execute`` (the request ``bench/wrk/execauth.lua`` sends, a PERMIT) goes
through the gateway's ASGI app as ``serve --workers 1`` builds it, in process, and is
committed by the in-process writer on its thread; a profile hook on every thread
records each call into a function of an ``execauth`` module until the answer has left
and the writer is idle again. Printed: each module with its calls, in the order the
path first enters it, and the totals. Under ``serve --workers N`` the same work is
split over the gateway and the writer process, with two more modules for the frames
between them (``serving/remote_writer.py``, ``serving/writer_process.py``) and the HTTP
protocol in front (``api/server_limits.py``), which an in-process call does not run.

Issue 15 asked for the path to be counted before and after its redesign; the figures
are in docs/performance.md, "The fast-state round". The hook's own cost makes this no
timing; the counts do not depend on the machine.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
from collections.abc import MutableMapping
from pathlib import Path
from types import FrameType
from typing import Any

from in_process import BODY, checkout_source_first, execute_scope, provisioned_app

WARM_UP = 50  # executes before the traced one: caches filled, as on a serving gateway


class CallRecorder:
    """A profile hook (``sys.setprofile``) counting calls into ``execauth`` modules while on."""

    def __init__(self) -> None:
        self.on = False
        self.calls: dict[str, int] = {}  # module → calls, in the order first entered

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if self.on and event == "call":
            module = frame.f_globals.get("__name__", "")
            if module.startswith("execauth"):
                self.calls[module] = self.calls.get(module, 0) + 1


async def _trace(workdir: Path, recorder: CallRecorder) -> None:
    async with provisioned_app(workdir, workers=1, decision_log="file") as (app, _, secret):
        sent: list[MutableMapping[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": BODY, "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        for number in range(WARM_UP):
            await app(execute_scope(secret, f"warm-up-{number}"), receive, send)
        sent.clear()
        recorder.on = True
        sys.setprofile(recorder)
        try:
            await app(execute_scope(secret, "traced"), receive, send)
            await asyncio.sleep(0.05)  # what the answer scheduled runs; the writer settles
        finally:
            sys.setprofile(None)
            recorder.on = False
        if sent[0]["status"] != 200 or b'"decision":"PERMIT"' not in sent[1]["body"]:
            raise RuntimeError(f"not a PERMIT: {sent}")


def main() -> int:
    recorder = CallRecorder()
    # Set before any thread starts, so that the writer's thread carries the hook too;
    # it counts nothing until the traced execute.
    threading.setprofile(recorder)
    with tempfile.TemporaryDirectory(prefix="execauth-path-length-") as scratch:
        asyncio.run(_trace(Path(scratch), recorder))
    for module, calls in recorder.calls.items():
        print(f"{calls:5d}  {module}")
    print(f"one execute: {len(recorder.calls)} modules, {sum(recorder.calls.values())} calls")
    return 0


if __name__ == "__main__":
    checkout_source_first()
    raise SystemExit(main())
