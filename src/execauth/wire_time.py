"""The one timestamp format on the wire: RFC 3339, UTC, milliseconds, ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime


def epoch_millis(moment: datetime) -> int:
    """Milliseconds since the Unix epoch: how the store keeps a decision's time
    (``decided_at_ms``), and what receipt and execution ids begin with."""
    return int(moment.timestamp() * 1000)


def truncate_to_millis(moment: datetime) -> datetime:
    """Drop sub-millisecond precision so the wire form and the policy's ``now`` agree exactly."""
    moment = moment.astimezone(UTC)
    return moment.replace(microsecond=(moment.microsecond // 1000) * 1000)


def format_timestamp(moment: datetime) -> str:
    """Render ``moment`` as e.g. ``2026-11-22T10:15:30.123Z``."""
    # isoformat always writes four-digit years (strftime's %Y does not below 1000)
    # and is faster; a UTC datetime ends in "+00:00", which becomes "Z".
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def parse_timestamp(text: str) -> datetime:
    """Parse an RFC 3339 timestamp; naive, malformed or out-of-range input raises ``ValueError``.

    A moment whose UTC form falls outside years 1–9999 (``0001-01-01T00:00:00+01:00``,
    ``9999-12-31T23:59:59-01:00``) cannot be a ``datetime`` in UTC: ``astimezone``
    raises ``OverflowError``, which becomes the ``ValueError`` every caller handles.
    """
    if not isinstance(text, str) or "T" not in text:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp has no time zone: {text!r}")
    try:
        return parsed.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError(f"timestamp is outside years 1 to 9999 in UTC: {text!r}") from exc
