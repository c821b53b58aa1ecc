"""Tables at 80 columns break lines between words, never inside one."""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest

from execauth.cli.console_client import print_table

KEY_COLUMNS = ("key_id", "name", "role", "surfaces", "expires_at", "revoked_at")
KEY: dict[str, object] = {
    "key_id": "key_01m8416t7tgdrh74w30h1wmevn",
    "name": "github deploy key",
    "role": "execute",
    "surfaces": ["deploy.production", "deploy.staging"],
    "expires_at": "2026-11-23T11:03:39.514Z",
    "revoked_at": "2026-11-24T08:00:00.000Z",
}
ORG: dict[str, object] = {
    "org_id": "org_01m8416t2ceseqqk935kxkjynv",
    "name": "Acme",
    "plan": "unmetered",
}


def printed(
    capsys: pytest.CaptureFixture[str], columns: tuple[str, ...], row: dict[str, object]
) -> str:
    print_table(columns, [row, row])
    return capsys.readouterr().out


@pytest.fixture(autouse=True)
def eighty_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")


def words(row: Mapping[str, object]) -> list[str]:
    values = [", ".join(v) if isinstance(v, list) else str(v) for v in row.values()]
    return [w for value in values for w in re.split(r"[\s,]+", value) if w]


def test_a_wide_row_keeps_every_word_whole_at_80_columns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = printed(capsys, KEY_COLUMNS, KEY)
    for word in words(KEY):
        assert any(word in line for line in out.splitlines()), word


def test_a_wide_row_keeps_every_column_name_whole(capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys, KEY_COLUMNS, KEY)
    for column in KEY_COLUMNS:
        assert column in out


def test_no_line_is_wider_than_the_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys, KEY_COLUMNS, KEY)
    assert max(len(line) for line in out.splitlines()) <= 80


def test_a_narrow_table_stays_one_row_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys, ("org_id", "name", "plan"), ORG)
    lines = [line for line in out.splitlines() if str(ORG["org_id"]) in line]
    assert len(lines) == 2
    assert all("unmetered" in line for line in lines)
