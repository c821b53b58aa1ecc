"""``execauth policy check FILE|DIR``: offline, the publish check, exit 0 / 1 / 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner, Result

from execauth.cli import app

COOKBOOK = Path(__file__).resolve().parents[2] / "examples" / "policies"
TYPO = """\
surfaces:
  - match: deploy.production
    rules:
      - id: from-main
        permit: contxt.branch == "main"
"""


def _check(path: Path) -> Result:
    return CliRunner().invoke(app, ["policy", "check", str(path)])


def test_check_of_valid_policies_exits_0_and_lists_them() -> None:
    result = _check(COOKBOOK)
    assert result.exit_code == 0, result.output
    assert "ok       deploys" in result.stdout
    assert "0 refused" in result.stdout


def test_check_refuses_a_misspelled_variable_naming_file_line_rule_and_name(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "deploys.yaml"
    policy.write_text(TYPO)
    result = _check(policy)
    assert result.exit_code == 1
    assert f"{policy}:5: rule from-main: surfaces[0].rules[0].permit: unknown name(s) 'contxt'" in (
        result.stderr
    )


def test_check_reports_every_refused_file_of_a_directory(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(TYPO)
    (tmp_path / "b.yaml").write_text(TYPO.replace("contxt", "ctx"))
    (tmp_path / "c.yaml").write_text(TYPO.replace("contxt", "context"))
    result = _check(tmp_path)
    assert result.exit_code == 1
    assert "'contxt'" in result.stderr
    assert "'ctx'" in result.stderr
    assert "2 refused" in result.stdout


def test_check_refuses_two_files_with_the_same_policy_id(tmp_path: Path) -> None:
    valid = TYPO.replace("contxt", "context")
    (tmp_path / "a.yaml").write_text("policy_id: deploys\n" + valid)
    (tmp_path / "b.yaml").write_text("policy_id: deploys\n" + valid)
    result = _check(tmp_path)
    assert result.exit_code == 1
    assert "policy_id 'deploys' is also the id of" in result.stderr


def test_check_of_a_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    assert _check(tmp_path / "missing").exit_code == 2


def test_check_of_a_directory_without_policies_is_a_usage_error(tmp_path: Path) -> None:
    assert _check(tmp_path).exit_code == 2


def test_check_imports_nothing_of_the_server() -> None:
    """The offline tools start fast: no Starlette, SQLAlchemy or HTTP client behind them."""
    probe = (
        "import sys, execauth.cli.policy_tools; "
        "print(sorted(m for m in ('starlette', 'sqlalchemy', 'httpx') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "[]"
