"""Stored JSON made readable for people: audit details as labelled values, not raw JSON.

Pure and small on purpose: the console shows the same facts the JSON API returns,
only laid out (``{"plan": {"from": "free", "to": "standard"}}`` reads
``plan: free → standard``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

MAX_ITEMS = 20  # an audit event's details are small; a huge one is shown in part, not hidden


def detail_items(details: Any) -> list[tuple[str, str]]:
    """``(label, value)`` pairs for an audit event's details, nested keys joined with dots."""
    if details is None:
        return []
    if not isinstance(details, Mapping):
        return [("", _scalar(details))]
    items: list[tuple[str, str]] = []
    _walk("", details, items)
    if len(items) > MAX_ITEMS:
        hidden = len(items) - MAX_ITEMS
        items = [*items[:MAX_ITEMS], ("…", f"{hidden} more (see the JSON API)")]
    return items


def _walk(prefix: str, value: Mapping[str, Any], items: list[tuple[str, str]]) -> None:
    for key, item in value.items():
        label = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(item, Mapping) and set(item) == {"from", "to"}:
            items.append((label, f"{_scalar(item['from'])} → {_scalar(item['to'])}"))
        elif isinstance(item, Mapping) and item:
            _walk(label, item, items)
        else:
            items.append((label, _scalar(item)))


def _scalar(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ", ".join(_scalar(v) for v in value) if value else "none"
    if isinstance(value, Mapping):
        return json.dumps(value, ensure_ascii=False, sort_keys=True) if value else "—"
    return str(value)
