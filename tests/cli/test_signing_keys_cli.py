"""``execauth signing-keys rotate`` on the database directly (docs/operations.md, "Signing keys").

A key rotated by hand is published before it signs, so every running process lists it
before any process signs with it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from execauth.cli import app
from execauth.keyring import ROTATION_OVERLAP
from execauth.wire_time import parse_timestamp


def _env(tmp_path: Path, refresh_interval: str) -> dict[str, str]:
    return {
        "EXECAUTH_DATABASE_URL": f"sqlite:///{tmp_path / 'execauth.db'}",
        "EXECAUTH_SECRET_KEY": "s" * 40,
        "EXECAUTH_REFRESH_INTERVAL_SECONDS": refresh_interval,
    }


def _keys(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    listed = CliRunner().invoke(app, ["signing-keys", "list", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    return {entry["key_id"]: entry for entry in json.loads(listed.stdout)}


def test_a_rotated_key_signs_two_refresh_intervals_after_it_is_published(tmp_path: Path) -> None:
    env = _env(tmp_path, "5")
    first = CliRunner().invoke(app, ["signing-keys", "rotate"], env=env)
    assert first.exit_code == 0, first.output
    before = datetime.now(UTC)
    second = CliRunner().invoke(app, ["signing-keys", "rotate"], env=env)
    after = datetime.now(UTC)
    assert second.exit_code == 0, second.output
    new_key_id = second.stdout.split()[3]
    signs_from = parse_timestamp(_keys(env)[new_key_id]["created_at"])
    lead = timedelta(seconds=10)
    assert before + lead - timedelta(milliseconds=1) <= signs_from <= after + lead


def test_the_keys_a_rotation_retires_sign_until_an_overlap_after_the_new_key_starts(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path, "1")
    first = CliRunner().invoke(app, ["signing-keys", "rotate"], env=env)
    old_key_id = first.stdout.split()[3]
    second = CliRunner().invoke(app, ["signing-keys", "rotate"], env=env)
    keys = _keys(env)
    signs_from = parse_timestamp(keys[second.stdout.split()[3]]["created_at"])
    assert parse_timestamp(keys[old_key_id]["expires_at"]) == signs_from + ROTATION_OVERLAP
