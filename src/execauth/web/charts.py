"""Geometry for the usage page's inline SVG bars (pure: a usage report in, rectangles out)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from execauth.tenancy.usage import DECISIONS

WIDTH = 600  # the drawing's own units; CSS scales the SVG to its container
LABEL = 180
ROW = 28
BAR = 18


@dataclass(frozen=True, slots=True)
class Segment:
    x: float
    width: float
    css: str  # "permit", "deny", "silence", "quota-used", "quota-left"
    title: str


@dataclass(frozen=True, slots=True)
class Row:
    y: int
    label: str
    value: str
    segments: list[Segment]


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    height: int
    rows: list[Row]


def usage_chart(report: dict[str, Any]) -> list[Chart]:
    """Quota, executes by decision, and executes by surface (stacked by decision)."""
    executes = report["executes"]
    quota = report["quota"]
    span = WIDTH - LABEL - 60
    charts = []

    limit, used = quota["limit"], quota["used"]
    if limit:
        share = min(used / limit, 1.0)
        segments = [
            Segment(LABEL, span * share, "quota-used", f"{used} used"),
            Segment(LABEL + span * share, span * (1 - share), "quota-left", f"{limit} included"),
        ]
        rows = [Row(0, f"Plan {report['plan']}", f"{used} / {limit}", segments)]
    else:
        rows = [Row(0, f"Plan {report['plan']}", f"{used} (no monthly limit)", [])]
    charts.append(_chart("Quota this month", rows))

    by_decision = executes["by_decision"]
    top = max([1, *by_decision.values()])
    rows = [
        Row(i * ROW, d, str(by_decision.get(d, 0)),
            [Segment(LABEL, span * by_decision.get(d, 0) / top, d.lower(), f"{d}")])
        for i, d in enumerate(DECISIONS)
    ]  # fmt: skip
    charts.append(_chart("Executes by decision", rows))

    by_surface = executes["by_surface"]
    top = max([1, *(counts["total"] for counts in by_surface.values())])
    rows = []
    for i, (surface, counts) in enumerate(by_surface.items()):
        x, segments = float(LABEL), []
        for decision in DECISIONS:
            width = span * counts.get(decision, 0) / top
            if width:
                title = f"{surface}: {counts[decision]} {decision}"
                segments.append(Segment(x, width, decision.lower(), title))
            x += width
        rows.append(Row(i * ROW, surface, str(counts["total"]), segments))
    charts.append(_chart("Executes by surface", rows))
    return charts


def _chart(title: str, rows: list[Row]) -> Chart:
    return Chart(title, max(1, len(rows)) * ROW, rows)
