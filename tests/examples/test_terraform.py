"""examples/terraform/gated-apply.sh: terraform applies only the plan the receipt names.

``terraform`` here is a stand-in on PATH that answers ``workspace show`` and records what
``apply`` was given; the wrapper, ``sha256sum`` and ``execauth gate`` are the real ones.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from execauth.request import parse_execute_request
from tests.cli.conftest import RunningService
from tests.examples.conftest import EXAMPLES, example_env, provision

pytestmark = pytest.mark.e2e

WRAPPER = EXAMPLES / "terraform" / "gated-apply.sh"
FAKE_TERRAFORM = f"""#!{sys.executable}
import hashlib, json, os, sys
if sys.argv[1:] == ["workspace", "show"]:
    print("production")
    raise SystemExit(0)
plan = sys.argv[-1]
json.dump({{
    "argv": sys.argv[1:],
    "plan_digest": "sha256:" + hashlib.sha256(open(plan, "rb").read()).hexdigest(),
    "receipt": json.load(open(os.environ["EXECAUTH_RECEIPT_FILE"])),
}}, open(os.environ["APPLIED_RECORD"], "w"))
"""


@pytest.fixture(scope="module")
def api_key(service: RunningService) -> str:
    return provision(service, "infra-terraform.yaml")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    terraform = bin_dir / "terraform"
    terraform.write_text(FAKE_TERRAFORM)
    terraform.chmod(0o755)
    (tmp_path / "plan.tfplan").write_bytes(b"a saved terraform plan\x00\x01")
    return tmp_path


def digest_of(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def apply(
    service: RunningService, api_key: str, workdir: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    full_env = example_env(
        service, api_key, APPLIED_RECORD=str(workdir / "applied.json"), EXECAUTH_ACTOR="ci", **env
    )
    full_env["PATH"] = f"{workdir / 'bin'}:{full_env['PATH']}"
    return subprocess.run(
        ["bash", str(WRAPPER), "plan.tfplan"], cwd=workdir, env=full_env, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip


def applied(workdir: Path) -> dict[str, Any] | None:
    record = workdir / "applied.json"
    return json.loads(record.read_text()) if record.exists() else None


def test_the_approved_plan_is_applied_under_a_permit_that_names_it(
    service: RunningService, api_key: str, workdir: Path
) -> None:
    plan_digest = digest_of(workdir / "plan.tfplan")
    result = apply(service, api_key, workdir, APPROVED_PLAN_DIGEST=plan_digest)
    assert result.returncode == 0, result.stderr
    record = applied(workdir)
    assert record is not None
    assert record["argv"][:2] == ["apply", "-input=false"]
    assert record["plan_digest"] == plan_digest  # the private copy is the authorized plan
    context = {"workspace": "production", "plan_digest": plan_digest}
    context["approved_plan_digest"] = plan_digest
    sent = {"surface": "infra.terraform.apply", "actor": "ci", "context": context}
    assert record["receipt"]["decision"] == "PERMIT"
    assert record["receipt"]["request_digest"] == parse_execute_request(sent, None).digest


@pytest.mark.parametrize(
    ("approval", "reason"),
    [
        ({"APPROVED_PLAN_DIGEST": "sha256:" + "0" * 64}, "SERVICE_POLICY_PLAN_MISMATCH"),
        ({}, "SERVICE_POLICY_PLAN_NOT_APPROVED"),
    ],
    ids=["another-plan-approved", "no-approval"],
)
def test_a_plan_that_was_not_approved_is_not_applied(
    service: RunningService, api_key: str, workdir: Path, approval: dict[str, str], reason: str
) -> None:
    result = apply(service, api_key, workdir, **approval)
    assert result.returncode == 77
    assert reason in result.stderr
    assert applied(workdir) is None


def test_an_unreachable_service_applies_nothing(
    service: RunningService, api_key: str, workdir: Path
) -> None:
    result = apply(service, api_key, workdir, EXECAUTH_URL="http://127.0.0.1:9")
    assert result.returncode == 69
    assert applied(workdir) is None
