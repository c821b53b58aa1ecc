"""Geometry for the console's inline SVG charts (pure: counts in, rectangles out).

The usage page's bars (a month's report) and the timeline's columns (executes per
hour or per day, stacked by decision and by surface). The counts come from the
same grouped query the usage report uses (``ExecutionStore.usage_rows``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from execauth.tenancy.usage import DECISIONS, UsageRow
from execauth.wire_time import format_timestamp

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


# --- decisions over time (the timeline page) ---------------------------------

WINDOWS = {"24h": (timedelta(hours=1), 24), "14d": (timedelta(days=1), 14)}
DEFAULT_WINDOW = "24h"
SERIES_WIDTH = 720
SERIES_HEIGHT = 160
AXIS = 20  # room under the columns for the time labels
MAX_SURFACES = 5  # more would be colours nobody can tell apart: the rest is "other"
OTHER = "other surfaces"


@dataclass(frozen=True, slots=True)
class Bucket:
    start: datetime
    end: datetime
    rows: list[UsageRow]


@dataclass(frozen=True, slots=True)
class Column:
    x: float
    width: float
    label: str  # shown under every few columns; "" elsewhere
    title: str  # the column's period and its total, as a tooltip
    segments: list[tuple[float, float, str, str]]  # (y, height, css class, tooltip)


@dataclass(frozen=True, slots=True)
class Series:
    """A stacked column chart: one column per period, stacked by decision or by surface."""

    title: str
    height: int
    top: int
    columns: list[Column]
    legend: list[tuple[str, str]]  # (css class, label)
    empty: bool


def buckets(now: datetime, window: str) -> list[tuple[datetime, datetime]]:
    """The window's periods, oldest first, aligned to whole hours or days (UTC)."""
    step, count = WINDOWS[window]
    if step >= timedelta(days=1):
        end = now.replace(hour=0, minute=0, second=0, microsecond=0) + step
    else:
        end = now.replace(minute=0, second=0, microsecond=0) + step
    return [(end - step * (count - i), end - step * (count - i - 1)) for i in range(count)]


def decision_series(filled: list[Bucket], window: str) -> list[Series]:
    """Executes per period, stacked by decision, and the same periods stacked by surface."""
    totals: dict[str, int] = {}
    for bucket in filled:
        for row in bucket.rows:
            totals[row.surface] = totals.get(row.surface, 0) + row.count
    ranked = sorted(totals, key=lambda s: (-totals[s], s))
    shown = ranked[:MAX_SURFACES]
    surface_css = {s: f"s{i}" for i, s in enumerate(shown)}

    def by_decision(rows: list[UsageRow]) -> list[tuple[str, str, int]]:
        counts = dict.fromkeys(DECISIONS, 0)
        for row in rows:
            counts[row.decision] = counts.get(row.decision, 0) + row.count
        return [(d.lower(), d, counts[d]) for d in DECISIONS]

    def by_surface(rows: list[UsageRow]) -> list[tuple[str, str, int]]:
        counts = dict.fromkeys([*shown, OTHER], 0)
        for row in rows:
            counts[row.surface if row.surface in surface_css else OTHER] += row.count
        return [(surface_css.get(s, "other"), s, n) for s, n in counts.items()]

    legend_surfaces = [(surface_css[s], s) for s in shown]
    if len(ranked) > MAX_SURFACES:
        legend_surfaces.append(("other", OTHER))
    return [
        _series("Executes by decision", filled, window, by_decision,
                [(d.lower(), d) for d in DECISIONS]),
        _series("Executes by surface", filled, window, by_surface, legend_surfaces),
    ]  # fmt: skip


def _series(
    title: str,
    filled: list[Bucket],
    window: str,
    split: Callable[[list[UsageRow]], list[tuple[str, str, int]]],
    legend: list[tuple[str, str]],
) -> Series:
    stacks = [split(b.rows) for b in filled]
    top = max([1, *(sum(n for _, _, n in stack) for stack in stacks)])
    plot = SERIES_HEIGHT - AXIS
    slot = SERIES_WIDTH / max(1, len(filled))
    every = 3 if window == "24h" else 2  # a label under every few columns, so none overlap
    columns = []
    for i, (bucket, stack) in enumerate(zip(filled, stacks, strict=True)):
        y, segments = float(plot), []
        for css, name, n in stack:
            if n:
                height = plot * n / top
                y -= height
                segments.append((y, height, css, f"{name}: {n}"))
        total = sum(n for _, _, n in stack)
        label = _period_label(bucket.start, window) if i % every == 0 else ""
        period = f"{format_timestamp(bucket.start)} – {format_timestamp(bucket.end)}"
        columns.append(
            Column(i * slot + 1, slot - 2, label, f"{period}: {total} executes", segments)
        )
    empty = all(not c.segments for c in columns)
    return Series(title, SERIES_HEIGHT, top, columns, legend, empty)


def _period_label(start: datetime, window: str) -> str:
    return start.strftime("%H:00") if window == "24h" else start.strftime("%b %d")
