"""``bench/run.py`` records where the whole machine's cores went during a run.

A server that leaves cores idle while it is the bound is waiting on something other
than a core; the load generator's own CPU is the part of the machine neither server
can have (``machine_idle_percent``, ``load_tool_cpu_percent``, docs/performance.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from tests.module_files import load_module_file

BENCH = Path(__file__).parents[1] / "bench"
HERTZ = os.sysconf("SC_CLK_TCK")

# /proc/stat's aggregate line: user nice system idle iowait irq softirq steal guest
# guest_nice, in clock ticks; per-core lines follow it.
AGGREGATE = " ".join(str(seconds * HERTZ) for seconds in (7, 1, 2, 40, 3, 0, 1, 5, 6, 0))
STAT = f"cpu  {AGGREGATE}\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 12345\n"


@pytest.fixture(scope="module")
def bench_run() -> ModuleType:
    return load_module_file("bench_run", BENCH / "run.py")


def test_busy_is_every_running_column_but_the_guest_time_user_already_holds(
    bench_run: ModuleType,
) -> None:
    assert bench_run.machine_cpu_seconds(STAT)["busy"] == pytest.approx(7 + 1 + 2 + 1)


def test_idle_disk_wait_and_the_hypervisors_share_are_kept_apart(
    bench_run: ModuleType,
) -> None:
    seconds = bench_run.machine_cpu_seconds(STAT)
    assert (seconds["idle"], seconds["iowait"], seconds["steal"]) == pytest.approx((40, 3, 5))


def test_a_stat_without_the_aggregate_line_is_refused(bench_run: ModuleType) -> None:
    with pytest.raises(ValueError, match="no aggregate cpu line"):
        bench_run.machine_cpu_seconds("cpu0 1 2 3 4 5 6 7 8 9 10\n")


def test_this_machines_counters_advance_with_the_wall_clock(bench_run: ModuleType) -> None:
    before = bench_run.machine_cpu_seconds(Path("/proc/stat").read_text())
    time.sleep(0.5)
    after = bench_run.machine_cpu_seconds(Path("/proc/stat").read_text())
    elapsed = sum(after.values()) - sum(before.values())
    cores = os.cpu_count() or 1
    assert 0.5 * 0.5 <= elapsed <= 0.5 * cores * 2  # every core, give or take a tick


def test_a_waited_for_childs_cpu_counts_as_the_load_tools(bench_run: ModuleType) -> None:
    before = bench_run.waited_children_cpu_seconds()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import time\nend = time.process_time() + 0.3\n"
            + "while time.process_time() < end: pass",
        ],
        check=True,
    )
    assert bench_run.waited_children_cpu_seconds() - before >= 0.25


def test_this_processs_own_cpu_does_not_count_as_the_load_tools(bench_run: ModuleType) -> None:
    before = bench_run.waited_children_cpu_seconds()
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    assert bench_run.waited_children_cpu_seconds() - before < 0.05
