"""The command line starts fast: a command imports only what it runs.

``execauth --help`` and the offline ``verify`` must not import the server (starlette,
uvicorn, SQLAlchemy, the policy engine); each is checked in a fresh interpreter, where
``sys.modules`` shows what a real invocation imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from execauth import __version__
from execauth.cli import COMMANDS, app

VECTORS = Path(__file__).resolve().parents[2] / "testdata" / "vectors"
# The server's stack, and our modules that pull it in.
SERVER_MODULES = (
    "starlette", "uvicorn", "sqlalchemy", "alembic", "cel", "psycopg",
    "execauth.api", "execauth.serving", "execauth.store", "execauth.policy", "execauth.usecases",
)  # fmt: skip

PROBE = """
import json, sys
from execauth.cli import app
try:
    app(sys.argv[1:])
except SystemExit as exit:
    status = exit.code
print(json.dumps({"status": status, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def imported_by(*args: str) -> tuple[int, set[str]]:
    """Run ``execauth ARGS`` in a fresh interpreter: its exit status and every module loaded."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=False
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["status"], set(report["modules"])


def server_modules(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.startswith(SERVER_MODULES) and not m.endswith("_"))


def test_help_imports_no_server_module() -> None:
    status, modules = imported_by("--help")
    assert status == 0
    assert server_modules(modules) == []


def test_help_imports_no_command_module() -> None:
    _, modules = imported_by("--help")
    assert not {f"execauth.cli.{m}" for m in ("serve", "db", "audit", "gate")} & modules


def test_verify_imports_no_server_module(tmp_path: Path) -> None:
    case = json.loads((VECTORS / "cases" / "deny-valid.json").read_text())
    receipt = tmp_path / "deny.json"
    receipt.write_text(json.dumps(case["receipt"]))
    keys = str(VECTORS / case["keys"])
    status, modules = imported_by("verify", str(receipt), "--keys", keys)
    assert status == 0
    assert server_modules(modules) == []


def test_verify_with_a_key_file_imports_no_http_client(tmp_path: Path) -> None:
    case = json.loads((VECTORS / "cases" / "deny-valid.json").read_text())
    receipt = tmp_path / "deny.json"
    receipt.write_text(json.dumps(case["receipt"]))
    _, modules = imported_by("verify", str(receipt), "--keys", str(VECTORS / case["keys"]))
    assert "httpx" not in modules


def test_version_prints_the_package_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"execauth {__version__}"


def test_help_lists_every_command_unabridged_at_80_columns() -> None:
    result = CliRunner().invoke(app, ["--help"], terminal_width=80)
    assert result.exit_code == 0
    for name, command in COMMANDS.items():
        assert f"{name}  " in result.stdout
        assert command.summary in result.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_listed_command_loads_and_shows_its_help(name: str) -> None:
    result = CliRunner().invoke(app, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert f"execauth {name}" in result.stdout


def test_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["serv"])
    assert result.exit_code == 2


def test_policy_check_imports_no_server_module() -> None:
    policy = VECTORS.parents[1] / "examples" / "policies" / "deploys.yaml"
    status, modules = imported_by("policy", "check", str(policy))
    assert status == 0
    # The policy engine (and CEL) is what it checks with; the server is not.
    beyond_the_engine = [
        m for m in server_modules(modules) if not m.startswith(("execauth.policy", "cel"))
    ]
    assert beyond_the_engine == []


READ_COMMANDS = [
    ("org", "list"), ("org", "show"), ("key", "list"), ("policy", "list"), ("policy", "show"),
    ("policy", "test"), ("policy", "eval"), ("usage", "show"),
    ("signing-keys", "list"), ("verify",), ("audit", "verify"), ("replay",),
]  # fmt: skip


@pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
def test_every_read_command_takes_json(command: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "--json" in result.stdout
