"""The one wire timestamp format: RFC 3339, UTC, milliseconds, ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from execauth.wire_time import format_timestamp, parse_timestamp, truncate_to_millis


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        (datetime(2026, 11, 22, 10, 15, 30, 123456, tzinfo=UTC), "2026-11-22T10:15:30.123Z"),
        (datetime(2026, 1, 1, tzinfo=UTC), "2026-01-01T00:00:00.000Z"),
        (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), "9999-12-31T23:59:59.999Z"),
    ],
)
def test_timestamps_have_milliseconds_and_z(moment: datetime, expected: str) -> None:
    assert format_timestamp(moment) == expected


def test_timestamps_in_other_zones_are_written_in_utc() -> None:
    plus_five = timezone(timedelta(hours=5))
    assert format_timestamp(datetime(2026, 1, 1, 5, 0, tzinfo=plus_five)) == (
        "2026-01-01T00:00:00.000Z"
    )


def test_years_before_1000_have_four_digits() -> None:
    assert format_timestamp(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00.000Z"


def test_formatted_timestamps_parse_back_to_the_truncated_moment() -> None:
    moment = datetime(2026, 11, 22, 10, 15, 30, 123456, tzinfo=UTC)
    assert parse_timestamp(format_timestamp(moment)) == truncate_to_millis(moment)


@pytest.mark.parametrize(
    "text", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "9999-12-31T23:30:00-00:31"]
)
def test_a_moment_outside_years_1_to_9999_in_utc_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="outside years 1 to 9999"):
        parse_timestamp(text)


def test_the_edges_of_the_range_in_utc_parse() -> None:
    assert parse_timestamp("0001-01-01T00:00:00-01:00") == datetime(1, 1, 1, 1, tzinfo=UTC)
    assert parse_timestamp("9999-12-31T23:59:59Z") == datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
