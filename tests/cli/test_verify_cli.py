"""``execauth verify``: exit 0 valid, 1 invalid or expired PERMIT, 2 usage error (issue #2 §8)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from execauth.cli import app
from execauth.keyring import ActiveSigner, generate_signing_key, key_list_document, unseal_signer
from execauth.policy.decision import Decision, Outcome, PolicyRef
from execauth.receipts import build_receipt, new_execution_id, new_receipt_id, sign_receipt
from execauth.request import parse_execute_request
from execauth.server_secret import ServerSecret

SECRET = ServerSecret("cli-test-secret-" + "c" * 32)


def make_receipt(
    signer: ActiveSigner,
    now: datetime,
    *,
    outcome: Outcome = Outcome.PERMIT,
    constraints: dict[str, Any] | None = None,
    single_use: bool = False,
) -> dict[str, Any]:
    request = parse_execute_request({"surface": "deploy.production", "actor": "release-bot"}, None)
    decision = Decision(
        outcome,
        "r1",
        None if outcome is Outcome.PERMIT else "SERVICE_POLICY_DENIED",
        None if outcome is Outcome.PERMIT else "denied",
        600 if outcome is Outcome.PERMIT else None,
        constraints=constraints,
        single_use=single_use,
    )
    unsigned = build_receipt(
        receipt_id=new_receipt_id(now),
        execution_id=new_execution_id(now),
        request=request,
        decision=decision,
        policy=PolicyRef("deploys", 1, "sha256:" + "0" * 64),
        org_id="org_test",
        issuer="https://execauth.test",
        now=now,
        key_id=signer.key_id,
    )
    return sign_receipt(unsigned, signer)[0]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    created = datetime.now(UTC) - timedelta(days=1)
    record = generate_signing_key(SECRET, created)
    signer = unseal_signer(SECRET, record)
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(key_list_document([record], "https://execauth.test")))
    now = datetime.now(UTC)
    paths = {"keys": keys}
    for name, receipt in {
        "permit": make_receipt(signer, now),
        "deny": make_receipt(signer, now, outcome=Outcome.DENY),
        "expired": make_receipt(signer, now - timedelta(hours=1)),
        "bound": make_receipt(signer, now, constraints={"max_amount": 500}, single_use=True),
    }.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(receipt))
    tampered = json.loads(paths["deny"].read_text()) | {"decision": "PERMIT"}
    paths["tampered"] = tmp_path / "tampered.json"
    paths["tampered"].write_text(json.dumps(tampered))
    return paths


def run(*args: str) -> Any:
    return CliRunner().invoke(app, ["verify", *args])


def test_valid_permit_exits_0(files: dict[str, Path]) -> None:
    result = run(str(files["permit"]), "--keys", str(files["keys"]))
    assert result.exit_code == 0, result.output
    assert result.output.startswith("VALID")


def test_valid_deny_exits_0(files: dict[str, Path]) -> None:
    assert run(str(files["deny"]), "--keys", str(files["keys"])).exit_code == 0


def test_tampered_receipt_exits_1_and_says_invalid(files: dict[str, Path]) -> None:
    result = run(str(files["tampered"]), "--keys", str(files["keys"]))
    assert result.exit_code == 1
    assert "INVALID" in result.output
    assert "bad_signature" in result.output


def test_expired_permit_exits_1_and_says_expired(files: dict[str, Path]) -> None:
    result = run(str(files["expired"]), "--keys", str(files["keys"]))
    assert result.exit_code == 1
    assert "EXPIRED" in result.output


def test_receipt_for_another_surface_fails_as_a_gate(files: dict[str, Path]) -> None:
    result = run(
        str(files["permit"]), "--keys", str(files["keys"]), "--expect-surface", "deploy.staging"
    )
    assert result.exit_code == 1
    assert "MISMATCH" in result.output


def test_receipt_for_another_actor_fails_as_a_gate(files: dict[str, Path]) -> None:
    result = run(str(files["permit"]), "--keys", str(files["keys"]), "--expect-actor", "mallory")
    assert result.exit_code == 1


def test_receipt_for_another_request_digest_fails_as_a_gate(files: dict[str, Path]) -> None:
    result = run(
        str(files["permit"]), "--keys", str(files["keys"]),
        "--expect-request-digest", "sha256:" + "1" * 64,
    )  # fmt: skip
    assert result.exit_code == 1


def test_matching_expectations_pass(files: dict[str, Path]) -> None:
    receipt = json.loads(files["permit"].read_text())
    result = run(
        str(files["permit"]), "--keys", str(files["keys"]),
        "--expect-surface", "deploy.production", "--expect-actor", "release-bot",
        "--expect-request-digest", receipt["request_digest"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output


def test_an_authentic_deny_fails_as_a_gate_for_its_own_request(files: dict[str, Path]) -> None:
    result = run(
        str(files["deny"]), "--keys", str(files["keys"]),
        "--expect-surface", "deploy.production", "--expect-actor", "release-bot",
    )  # fmt: skip
    assert result.exit_code == 1
    assert "decision is 'DENY', expected 'PERMIT'" in result.output


def test_expect_decision_names_the_decision_a_gate_accepts(files: dict[str, Path]) -> None:
    result = run(
        str(files["deny"]), "--keys", str(files["keys"]),
        "--expect-surface", "deploy.production", "--expect-decision", "DENY",
    )  # fmt: skip
    assert result.exit_code == 0, result.output


def test_expect_decision_alone_fails_on_another_decision(files: dict[str, Path]) -> None:
    result = run(str(files["permit"]), "--keys", str(files["keys"]), "--expect-decision", "DENY")
    assert result.exit_code == 1
    assert "MISMATCH" in result.output


def test_unknown_key_exits_1(files: dict[str, Path], tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"keys": [], "issuer": "https://execauth.test"}))
    result = run(str(files["permit"]), "--keys", str(empty))
    assert result.exit_code == 1
    assert "unknown_key" in result.output


def test_missing_receipt_file_is_a_usage_error(files: dict[str, Path]) -> None:
    assert run("/nonexistent.json", "--keys", str(files["keys"])).exit_code == 2


def test_unknown_option_is_a_usage_error(files: dict[str, Path]) -> None:
    assert run(str(files["permit"]), "--frobnicate").exit_code == 2


def test_json_output_reports_the_verdict(files: dict[str, Path]) -> None:
    result = run(str(files["expired"]), "--keys", str(files["keys"]), "--json")
    verdict = json.loads(result.output)
    assert verdict["status"] == "EXPIRED"
    assert verdict["authentic"] is True
    assert verdict["expired"] is True


def test_json_output_reports_the_bound_grant(files: dict[str, Path]) -> None:
    result = run(str(files["bound"]), "--keys", str(files["keys"]), "--json")
    verdict = json.loads(result.output)
    assert result.exit_code == 0, result.output
    assert verdict["constraints"] == {"max_amount": 500}
    assert verdict["single_use"] is True


def test_json_output_omits_grant_keys_when_the_receipt_has_none(files: dict[str, Path]) -> None:
    verdict = json.loads(run(str(files["permit"]), "--keys", str(files["keys"]), "--json").output)
    assert "constraints" not in verdict
    assert "single_use" not in verdict
