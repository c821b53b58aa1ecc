"""Why a core idles under load: nothing to run, or a task queued behind another core's.

    perf sched record -o /tmp/sched.data -- sleep 3     # while a load runs (as root)
    .venv/bin/python bench/sched_idle.py /tmp/sched.data

Reads the scheduler's events (``perf script``: switches, wake-ups, migrations) and
follows each core's running task and the tasks that are ready but not running, each on
the run queue the kernel put it on. Each moment a core is idle is counted as one of:
- **nothing waiting**: no task anywhere was ready to run; the work was elsewhere (a
  disk flush, the load generator's turn-around, a reply in flight);
- **a task waiting on another core**: some task was ready, queued behind the task
  running on another core, while this one had nothing to run.

The second is placement, not a lack of work: under ``make bench`` execauth leaves a
part of the machine idle that Cerbos does not (docs/performance.md, "What bounds it
now"), and this says how much of it had work waiting. Printed: the split, in percent of
the cores' time, and the tasks that were waiting while a core idled.

The runs are the kernel's own tracepoints, so the figures hold for the recording's
window only; ``perf sched record`` adds a few percent of load of its own.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field

_EVENT = re.compile(r"\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):\s+(.*)")
_SWITCH = re.compile(
    r"prev_comm=(?P<prev_comm>.*?) prev_pid=(?P<prev_pid>\d+) .*?prev_state=(?P<state>\S+)"
    r" ==> next_comm=(?P<next_comm>.*?) next_pid=(?P<next_pid>\d+)"
)
_WAKING = re.compile(r"comm=(?P<comm>.*?) pid=(?P<pid>\d+) .*?target_cpu=(?P<cpu>\d+)")
_MIGRATE = re.compile(r" pid=(?P<pid>\d+) .*?dest_cpu=(?P<cpu>\d+)")
IDLE_PID = 0


@dataclass
class CoreTimeline:
    """The cores' states between two events, summed over the recording."""

    running: dict[int, int] = field(default_factory=dict)  # core -> pid (0: idle)
    waiting: dict[int, int] = field(default_factory=dict)  # ready pid -> its run queue's core
    names: dict[int, str] = field(default_factory=dict)
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    waiting_while_idle: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    _last: float | None = None

    def advance(self, now: float) -> None:
        """Count the span since the last event under the state it had."""
        if self._last is not None:
            span = now - self._last
            for core, pid in self.running.items():
                if pid != IDLE_PID:
                    self.seconds["busy"] += span
                    continue
                elsewhere = [p for p, queue in self.waiting.items() if queue != core]
                if not elsewhere:
                    self.seconds["idle, nothing waiting"] += span
                    continue
                self.seconds["idle, a task waiting on another core"] += span
                for pid_waiting in elsewhere:
                    name = self.names.get(pid_waiting, str(pid_waiting))
                    self.waiting_while_idle[name] += span / len(elsewhere)
        self._last = now

    def switch(self, core: int, fields: dict[str, str]) -> None:
        previous, following = int(fields["prev_pid"]), int(fields["next_pid"])
        self.names[previous] = f"{fields['prev_comm']}[{previous}]"
        self.names[following] = f"{fields['next_comm']}[{following}]"
        if previous != IDLE_PID and fields["state"].startswith("R"):
            self.waiting[previous] = core  # preempted: still ready, on this core's queue
        self.waiting.pop(following, None)
        self.running[core] = following

    def wake(self, pid: int, core: int) -> None:
        if pid not in self.running.values():
            self.waiting[pid] = core

    def migrate(self, pid: int, core: int) -> None:
        if pid in self.waiting:
            self.waiting[pid] = core


def timeline(data: str) -> CoreTimeline:
    script = subprocess.run(
        ["perf", "script", "-i", data, "-F", "cpu,time,event,trace"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cores = CoreTimeline()
    for line in script.splitlines():
        event = _EVENT.match(line.strip())
        if event is None:
            continue
        core, now, name, trace = int(event[1]), float(event[2]), event[3], event[4]
        cores.advance(now)
        if name == "sched_switch" and (switch := _SWITCH.search(trace)):
            cores.switch(core, switch.groupdict())
        elif name == "sched_waking" and (waking := _WAKING.search(trace)):
            cores.names.setdefault(int(waking["pid"]), f"{waking['comm']}[{waking['pid']}]")
            cores.wake(int(waking["pid"]), int(waking["cpu"]))
        elif name == "sched_migrate_task" and (moved := _MIGRATE.search(trace)):
            cores.migrate(int(moved["pid"]), int(moved["cpu"]))
    return cores


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data", help="a perf sched record file")
    parser.add_argument("--tasks", type=int, default=8, help="waiting tasks to list")
    args = parser.parse_args(argv)
    cores = timeline(args.data)
    total = sum(cores.seconds.values())
    for state in ("busy", "idle, nothing waiting", "idle, a task waiting on another core"):
        spent = cores.seconds[state]
        print(f"{state}: {1000 * spent:,.1f} ms, {100 * spent / total:.1f} % of the cores' time")
    print("ready, on another core's queue, while a core idled (ms):")
    waiting = sorted(cores.waiting_while_idle.items(), key=lambda item: -item[1])
    for name, spent in waiting[: args.tasks]:
        print(f"  {name}: {1000 * spent:,.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
