"""deploy/systemd/execauth.service: what ``systemd-analyze verify`` accepts, as documented."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "execauth.service"
EXECAUTH = str(Path(sys.executable).parent / "execauth")


def service_lines(key: str) -> list[str]:
    return [
        line.split("=", 1)[1]
        for line in UNIT.read_text().splitlines()
        if line.startswith(key + "=")
    ]


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # The unit names the documented install path; point it at this checkout's execauth.
    unit = tmp_path / "execauth.service"
    unit.write_text(UNIT.read_text().replace("/opt/execauth/bin/execauth", EXECAUTH))
    verified = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, check=False, timeout=60
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stderr == "", verified.stderr


def test_the_unit_migrates_once_before_serving_and_serve_does_not() -> None:
    assert service_lines("ExecStartPre") == ["/opt/execauth/bin/execauth db upgrade"]
    assert service_lines("ExecStart") == ["/opt/execauth/bin/execauth serve"]
    assert "EXECAUTH_MIGRATE_ON_START=false" in service_lines("Environment")


def test_secrets_reach_the_service_as_credential_files_not_environment() -> None:
    credentials = [line.split(":")[0] for line in service_lines("LoadCredential")]
    assert credentials == ["EXECAUTH_SECRET_KEY", "EXECAUTH_ADMIN_TOKEN"]
    assert "EXECAUTH_SECRETS_DIR=%d" in service_lines("Environment")
    env_file = configparser.ConfigParser()
    env_file.read_string("[env]\n" + (UNIT.parent / "execauth.env").read_text())
    assert not {"execauth_secret_key", "execauth_admin_token"} & set(env_file["env"])


def test_the_service_runs_unprivileged_and_stops_gracefully() -> None:
    assert service_lines("User") == ["execauth"]
    assert service_lines("NoNewPrivileges") == ["yes"]
    assert service_lines("CapabilityBoundingSet") == [""]
    assert service_lines("KillSignal") == ["SIGTERM"]
