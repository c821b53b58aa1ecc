"""The same benchmark run several times in a row, and the median of what each run compared.

    .venv/bin/python bench/run.py --rounds 5 [any other bench/run.py options]

On a shared VM the machine's speed changes from minute to minute: in one session Cerbos
served 2,152–3,934 req/s and execauth, its code unchanged, 2,076–3,217
(docs/performance.md, "The in-commit placement round"). One run's ratio then moves by
more than most steps we measure, and a target read from one run is read from the noise.
The targets compare execauth with Cerbos *in the same run*, so every round here is one
whole ``bench/run.py`` run (its own servers, databases and JSON in bench/results/), and
this module only reads the ratios each run wrote and reports, for each, every round's
value and their median. A ratio is never formed between two runs: execauth from one run
is not divided by Cerbos from another.

The summary goes to stdout and to ``bench/results/rounds-<timestamp>.json``, which
names the runs it read.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
WRITTEN = "written: "  # bench/run.py's last line names its JSON

Report = dict[str, Any]


def run_rounds(argv: list[str], rounds: int) -> int:
    """Run ``bench/run.py argv`` as one round, ``rounds`` times, then summarize."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    paths: list[Path] = []
    for number in range(1, rounds + 1):
        print(f"[bench] round {number} of {rounds}", file=sys.stderr, flush=True)
        path = _one_run(one_round(argv))
        if path is None:
            print(f"[bench] round {number} wrote no result; stopping", file=sys.stderr)
            return 1
        paths.append(path)
    reports = [json.loads(path.read_text()) for path in paths]
    measures = summarize(reports)
    print()
    print(rounds_table(measures, rounds))
    summary = {
        "timestamp": stamp,
        "command": " ".join(["run.py", *argv]),
        "runs": [str(path.relative_to(ROOT)) for path in paths],
        "measures": measures,
    }
    output = RESULTS / f"rounds-{stamp}.json"
    output.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nwritten: {output.relative_to(ROOT)}")
    return 0


def one_round(argv: list[str]) -> list[str]:
    """The command line of one round: ``argv`` asking for a single run.

    argparse keeps the last value an option is given, and accepts any unambiguous prefix
    of its name; ``--rounds 1`` at the end overrides ``--rounds 5``, ``--rounds=5`` and
    ``--round 5`` alike, where removing the option by its spelling would miss the last
    and start rounds inside each round.
    """
    return [*argv, "--rounds", "1"]


def _one_run(argv: list[str]) -> Path | None:
    """One whole ``bench/run.py`` run, its output passed through; the JSON it wrote."""
    written: Path | None = None
    with subprocess.Popen(
        [sys.executable, str(BENCH / "run.py"), *argv],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    ) as child:
        assert child.stdout is not None
        for line in child.stdout:
            print(line, end="", flush=True)
            if line.startswith(WRITTEN):
                written = ROOT / line.removeprefix(WRITTEN).strip()
    if child.returncode != 0:
        return None
    return written


# Each measure: its name and how to read it from one run's report (None: not in that run).
Reader = Callable[[Report], float | None]


def _ratio(name: str, field: str) -> Reader:
    return lambda report: report["ratios"].get(name, {}).get(field)


def _result(target: str, field: str) -> Reader:
    """A field of one target's row in the run's results (None: the target did not run)."""

    def read(report: Report) -> float | None:
        row = next((r for r in report["results"] if r["target"] == target), None)
        return None if row is None else row.get(field)

    return read


def _fixed_rate_p99(share: float) -> Reader:
    """execauth's p99 over Cerbos's at ``share`` of Cerbos's peak, in the same run."""

    def read(report: Report) -> float | None:
        scenario = _scenario(report, "fixed-rate")
        if scenario is None:
            return None
        p99 = {
            p["target"]: p["p99_ms"]
            for p in scenario["points"]
            if p["share_of_cerbos_peak"] == share
        }
        if not p99.get("cerbos") or "execauth" not in p99:
            return None
        return float(p99["execauth"] / p99["cerbos"])

    return read


def _storm_over_unique(report: Report) -> float | None:
    scenario = _scenario(report, "retry-storm")
    if scenario is None:
        return None
    return float(scenario["rps"] / scenario["unique_keys_same_clients"]["rps"])


def _scenario(report: Report, name: str) -> dict[str, Any] | None:
    return next((s for s in report.get("scenarios") or [] if s["scenario"] == name), None)


MEASURES: list[tuple[str, Reader]] = [
    ("execauth req/s", _result("execauth", "rps")),
    ("cerbos req/s", _result("cerbos", "rps")),
    ("req/s, execauth / cerbos (target 1: >= 1.0)", _ratio("execauth/cerbos", "rps")),
    ("CPU us a request, execauth", _result("execauth", "server_cpu_us_per_request")),
    ("CPU us a request, cerbos", _result("cerbos", "server_cpu_us_per_request")),
    # Cores no process used during each target's run (percent of one core): what a server
    # bound by a serial stage leaves, where one bound by its cores leaves none.
    ("idle cores %, execauth's run", _result("execauth", "machine_idle_percent")),
    ("idle cores %, cerbos's run", _result("cerbos", "machine_idle_percent")),
    ("p99 at saturation, execauth / cerbos (target 2: <= 2.0)", _ratio("execauth/cerbos", "p99")),
    ("p99 at 25 % of the peak, execauth / cerbos", _fixed_rate_p99(0.25)),
    ("p99 at 50 % of the peak, execauth / cerbos (target 2: <= 1.0)", _fixed_rate_p99(0.5)),
    ("p99 at 75 % of the peak, execauth / cerbos", _fixed_rate_p99(0.75)),
    ("retry storm / unique keys, req/s (target 3: >= 1.0)", _storm_over_unique),
    (
        "req/s, execauth on PostgreSQL / cerbos (target 4: >= 0.8)",
        _ratio("execauth-postgres/cerbos", "rps"),
    ),
]


def summarize(reports: list[Report]) -> dict[str, dict[str, Any]]:
    """Each measure the runs hold: every run's value (None where absent) and the median."""
    measures: dict[str, dict[str, Any]] = {}
    for name, read in MEASURES:
        values = [read(report) for report in reports]
        present = [v for v in values if v is not None]
        if not present:
            continue
        measures[name] = {
            "values": values,
            "median": statistics.median(present),
            "min": min(present),
            "max": max(present),
        }
    return measures


def rounds_table(measures: dict[str, dict[str, Any]], rounds: int) -> str:
    width = max(len(name) for name in measures) if measures else 10
    header = f"{'measure':<{width}}  " + "  ".join(f"{f'run {n}':>8}" for n in range(1, rounds + 1))
    lines = [header + f"  {'median':>8}", "-" * (len(header) + 10)]
    for name, measure in measures.items():
        cells = "  ".join(_cell(v) for v in measure["values"])
        lines.append(f"{name:<{width}}  {cells}  {_cell(measure['median'])}")
    return "\n".join(lines)


def _cell(value: float | None) -> str:
    if value is None:
        return f"{'-':>8}"
    return f"{value:>8,.0f}" if value >= 100 else f"{value:>8.2f}"
