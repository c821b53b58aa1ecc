"""``execauth policy test`` and ``execauth policy eval``: exit codes and output.

As docs/policy-language.md ("Testing policies", "Explaining a decision") states them.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner, Result

from execauth.cli import app

COOKBOOK = Path(__file__).resolve().parents[2] / "examples" / "policies"


def _run(*args: str) -> Result:
    return CliRunner().invoke(app, ["policy", *args])


def test_policy_test_exits_0_when_every_case_passes() -> None:
    result = _run("test", str(COOKBOOK))
    assert result.exit_code == 0, result.output
    assert "0 failed" in result.output


def test_policy_test_exits_1_when_a_case_fails(tmp_path: Path) -> None:
    cases = tmp_path / "wrong.cases.yaml"
    cases.write_text(
        "cases:\n  - name: wrong\n    request: {surface: payments.transfer}\n"
        "    expect: {decision: PERMIT}\n"
    )
    result = _run("test", str(COOKBOOK), "--cases", str(cases), "--json")
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["failed"] == 1
    assert report["cases"][0]["actual"]["reason"] == "SERVICE_POLICY_MISSING_CONTEXT"


def test_policy_test_exits_1_when_a_policy_is_invalid(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("surfaces: [{match: a.b, rules: [{id: r, deny: 'x &&'}]}]")
    (tmp_path / "p.cases.yaml").write_text("cases: []")
    result = _run("test", str(tmp_path))
    assert result.exit_code == 1
    assert "CEL does not compile" in result.output


def test_policy_test_exits_2_on_usage_errors(tmp_path: Path) -> None:
    assert _run("test", str(tmp_path / "missing")).exit_code == 2
    assert _run("test", str(COOKBOOK), "--cases", str(tmp_path / "none.yaml")).exit_code == 2
    bad = tmp_path / "bad.cases.yaml"
    bad.write_text("cases: [{name: a, request: {}, expect: {decision: NOPE}}]")
    assert _run("test", str(COOKBOOK), "--cases", str(bad)).exit_code == 2


def test_policy_eval_explains_a_decision(tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text(
        json.dumps(
            {
                "surface": "payments.transfer",
                "actor": "a",
                "payload": {"amount": 2000, "currency": "EUR"},
            }
        )
    )
    result = _run("eval", str(COOKBOOK), "--request", str(request), "--explain", "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert (answer["decision"], answer["rule_id"]) == ("DENY", "free-plan-limit")
    assert [b["match"] for b in answer["blocks"] if b["chosen"]] == ["payments.transfer"]
    assert {"path": "payload.amount", "present": True} in answer["require"]

    standard = _run(
        "eval", str(COOKBOOK / "payments.yaml"), "--request", str(request),
        "--org", '{"plan": "standard"}', "--now", "2026-01-07T10:00:00Z",
    )  # fmt: skip
    assert standard.exit_code == 0, standard.output
    assert standard.output.startswith("PERMIT")


def test_policy_eval_text_explanation(tmp_path: Path) -> None:
    request = tmp_path / "request.yaml"
    request.write_text("surface: deploy.production\nactor: release-bot\ncontext: {branch: main}\n")
    result = _run("eval", str(COOKBOOK), "--request", str(request), "--explain")
    assert result.exit_code == 0, result.output
    assert "SILENCE" in result.output
    assert "context.change_ticket: missing" in result.output
    assert "not evaluated" in result.output


def test_policy_eval_exits_2_on_a_bad_now(tmp_path: Path) -> None:
    request = tmp_path / "request.yaml"
    request.write_text("surface: a.b\n")
    assert _run("eval", str(COOKBOOK), "--request", str(request), "--now", "noon").exit_code == 2


GRANT_POLICY = """\
surfaces:
  - match: payments.transfer
    rules:
      - id: small-transfers
        permit: payload.amount <= 500
        constraints: {max_amount: {cel: payload.amount}, currency: EUR}
        single_use: true
"""


def _eval_explain(tmp_path: Path, amount: int) -> Result:
    (tmp_path / "payments.yaml").write_text(GRANT_POLICY)
    request = tmp_path / "request.yaml"
    request.write_text(f"surface: payments.transfer\npayload: {{amount: {amount}}}\n")
    policy = str(tmp_path / "payments.yaml")
    return _run("eval", policy, "--request", str(request), "--explain")


def test_policy_eval_text_explanation_shows_the_grant_of_a_permit(tmp_path: Path) -> None:
    result = _eval_explain(tmp_path, 120)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("PERMIT")
    assert (
        'grant constraints {"currency": "EUR", "max_amount": 120}; '
        "single use (consume before acting)" in result.output
    )


def test_policy_eval_text_explanation_of_a_deny_has_no_grant(tmp_path: Path) -> None:
    result = _eval_explain(tmp_path, 9000)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("DENY")
    assert "grant" not in result.output
