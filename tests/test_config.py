"""Configuration (issue: control plane): the plan catalog from TOML or the environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from execauth.config import Settings, serving_processes


def test_default_catalog_has_free_standard_and_unmetered_enterprise() -> None:
    plans = Settings().plan_catalog()
    assert plans["free"].executes_per_month == 1000
    assert plans["free"].requests_per_minute == 5000
    assert plans["enterprise"].executes_per_month is None
    assert plans["enterprise"].requests_per_minute == 10_000


def test_a_toml_catalog_replaces_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "execauth.toml"
    config.write_text(
        "[plans.team]\nexecutes_per_month = 50000\nrequests_per_minute = 600\n"
        "[plans.unlimited]\nunmetered = true\nrequests_per_minute = 20000\n"
    )
    monkeypatch.setenv("EXECAUTH_CONFIG_FILE", str(config))
    plans = Settings().plan_catalog()
    assert set(plans) == {"team", "unlimited"}
    assert plans["unlimited"].executes_per_month is None


def test_the_environment_wins_over_the_toml_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "execauth.toml"
    config.write_text('issuer = "https://from-toml.example"\n')
    monkeypatch.setenv("EXECAUTH_CONFIG_FILE", str(config))
    monkeypatch.setenv("EXECAUTH_ISSUER", "https://from-env.example")
    assert Settings().issuer == "https://from-env.example"


@pytest.mark.parametrize(
    "plan",
    [
        {"requests_per_minute": 10},
        {"executes_per_month": 10, "unmetered": True, "requests_per_minute": 10},
        {"executes_per_month": 0, "requests_per_minute": 10},
        {"executes_per_month": 10, "requests_per_minute": 0},
    ],
    ids=["no-limit-and-not-unmetered", "both", "zero-quota", "zero-rate"],
)
def test_a_plan_without_a_clear_limit_is_refused(plan: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Settings.model_validate({"plans": {"bad": plan}})


def test_an_empty_catalog_is_refused() -> None:
    with pytest.raises(ValidationError):
        Settings(plans={})


def test_the_log_level_and_format_are_read_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXECAUTH_LOG_LEVEL", "WARNING")
    monkeypatch.setenv("EXECAUTH_LOG_FORMAT", "Json")
    settings = Settings()
    assert (settings.log_level, settings.log_format) == ("warning", "json")


@pytest.mark.parametrize("field", ["log_level", "log_format"])
def test_an_unknown_log_level_or_format_is_refused(field: str) -> None:
    with pytest.raises(ValidationError):
        Settings.model_validate({field: "verbose"})


def test_serve_starts_one_worker_per_usable_core_by_default() -> None:
    assert Settings().workers is None  # resolved by `execauth serve`, not by the settings
    assert serving_processes(Path("/nonexistent")) == min(len(os.sched_getaffinity(0)), 64)


def test_a_cgroup_cpu_quota_caps_the_workers(tmp_path: Path) -> None:
    """A container limited to 1.5 CPUs gets 2 workers, not one per core of the host."""
    cores = len(os.sched_getaffinity(0))
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert serving_processes(tmp_path) == min(cores, 2)
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert serving_processes(tmp_path) == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert serving_processes(tmp_path) == min(cores, 64)
