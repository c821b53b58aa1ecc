"""``EXECAUTH_SECRETS_DIR``: settings read from mounted secret files (Docker, Kubernetes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from execauth.config import Settings

TOKEN = "service_admin_" + "t" * 43


@pytest.fixture
def secrets_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("EXECAUTH_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("EXECAUTH_DATABASE_URL", raising=False)
    monkeypatch.setenv("EXECAUTH_SECRETS_DIR", str(tmp_path))
    return tmp_path


def test_a_mounted_file_named_like_the_variable_sets_the_setting(secrets_dir: Path) -> None:
    (secrets_dir / "EXECAUTH_ADMIN_TOKEN").write_text(TOKEN + "\n")  # as `echo` writes it
    assert Settings().admin_token == TOKEN


def test_a_mounted_database_url_keeps_its_password_out_of_the_environment(
    secrets_dir: Path,
) -> None:
    url = "postgresql://execauth:p%40ss@db:5432/execauth"
    (secrets_dir / "execauth_database_url").write_text(url)
    assert Settings().database_url == url


def test_the_environment_wins_over_a_mounted_file(
    secrets_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (secrets_dir / "EXECAUTH_ADMIN_TOKEN").write_text(TOKEN)
    monkeypatch.setenv("EXECAUTH_ADMIN_TOKEN", "from-the-environment-" + "e" * 20)
    assert Settings().admin_token == "from-the-environment-" + "e" * 20


def test_without_a_secrets_dir_no_file_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EXECAUTH_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("EXECAUTH_SECRETS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "EXECAUTH_ADMIN_TOKEN").write_text(TOKEN)
    assert Settings().admin_token is None
