"""``bench/run.py --rounds N`` (bench/rounds.py) reports what each run compared, and the median.

Every round is one whole run of the benchmark; the summary may only read the ratios a run
measured between execauth and Cerbos in that run, never mix one run's execauth with
another's Cerbos. These tests read a run of record committed in bench/results/.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.module_files import load_module_file

BENCH = Path(__file__).parents[1] / "bench"
# A run of record with every scenario and PostgreSQL (docs/performance.md).
RUN_OF_RECORD = BENCH / "results" / "20261127T205909Z.json"
REQS = "req/s, execauth / cerbos (target 1: >= 1.0)"
HALF_PEAK = "p99 at 50 % of the peak, execauth / cerbos (target 2: <= 1.0)"
POSTGRES = "req/s, execauth on PostgreSQL / cerbos (target 4: >= 0.8)"


@pytest.fixture(scope="module")
def rounds() -> ModuleType:
    return load_module_file("bench_rounds", BENCH / "rounds.py")


@pytest.fixture
def report() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(RUN_OF_RECORD.read_text())
    return loaded


def test_a_round_reports_the_ratio_its_own_run_measured(
    rounds: ModuleType, report: dict[str, Any]
) -> None:
    measures = rounds.summarize([report])
    assert measures[REQS]["values"] == [report["ratios"]["execauth/cerbos"]["rps"]]


def test_the_fixed_rate_ratio_compares_the_two_targets_at_half_the_peak(
    rounds: ModuleType, report: dict[str, Any]
) -> None:
    points = next(s for s in report["scenarios"] if s["scenario"] == "fixed-rate")["points"]
    at_half = {p["target"]: p["p99_ms"] for p in points if p["share_of_cerbos_peak"] == 0.5}
    measures = rounds.summarize([report])
    assert measures[HALF_PEAK]["values"] == [at_half["execauth"] / at_half["cerbos"]]


def test_the_median_is_of_the_runs_that_measured_it(
    rounds: ModuleType, report: dict[str, Any]
) -> None:
    slower, without_postgres = copy.deepcopy(report), copy.deepcopy(report)
    slower["ratios"]["execauth/cerbos"]["rps"] = 0.5
    without_postgres["ratios"].pop("execauth-postgres/cerbos")
    measures = rounds.summarize([report, slower, without_postgres])
    ours = report["ratios"]["execauth/cerbos"]["rps"]
    assert measures[REQS]["median"] == ours  # of ours, 0.5 and ours
    assert measures[REQS]["min"] == 0.5
    postgres = report["ratios"]["execauth-postgres/cerbos"]["rps"]
    assert measures[POSTGRES]["values"] == [postgres, postgres, None]
    assert measures[POSTGRES]["median"] == postgres


def test_each_targets_idle_cores_are_read_from_its_own_run(
    rounds: ModuleType, report: dict[str, Any]
) -> None:
    for row, idle in zip(report["results"], range(10, 100, 10), strict=False):
        row["machine_idle_percent"] = idle
    idle_by_target = {row["target"]: row["machine_idle_percent"] for row in report["results"]}
    measures = rounds.summarize([report])
    assert measures["idle cores %, execauth's run"]["values"] == [idle_by_target["execauth"]]
    assert measures["idle cores %, cerbos's run"]["values"] == [idle_by_target["cerbos"]]


def test_a_measure_no_run_made_is_left_out(rounds: ModuleType, report: dict[str, Any]) -> None:
    report["scenarios"] = []
    assert HALF_PEAK not in rounds.summarize([report])


@pytest.mark.parametrize(
    "spelling", [["--rounds", "5"], ["--rounds=5"], ["--round", "5"], ["--rou=5"]]
)
def test_each_round_is_the_same_command_run_once(rounds: ModuleType, spelling: list[str]) -> None:
    # Read by bench/run.py's own parser: a round that asked for rounds would start its own.
    parser = load_module_file("bench_run", BENCH / "run.py").build_parser()
    argv = ["--duration", "10", *spelling, "--scenarios", "fixed-rate"]
    assert parser.parse_args(argv).rounds == 5
    args = parser.parse_args(rounds.one_round(argv))
    assert (args.rounds, args.duration, args.scenarios) == (1, 10, "fixed-rate")
