"""``execauth replay`` against a real ``execauth serve``: range replay and ``--draft`` impact.

Exit 0 when every replayed decision matches, 1 on a mismatch (or when the service
refuses), 2 on a usage error. A mismatch is provoked honestly: a stored execution's
recorded decision is altered in the service's database, as corruption would.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import RunningService
from tests.cli.test_admin_cli import (
    DENY,
    PERMIT,
    execute,
    issue_key,
    new_org,
    push_policy,
    run,
    run_json,
)
from tests.conftest import DEPLOY_POLICY

pytestmark = pytest.mark.e2e

SILENCE = {"surface": "deploy.production", "actor": "release-bot"}
# The deploy policy with a freeze: a PERMIT becomes SILENCE (the freeze and main-only
# conflict), a wrong-branch DENY becomes a freeze DENY.
FREEZE = DEPLOY_POLICY.replace(
    "      - id: main-only\n",
    "      - id: freeze\n        deny: 'true'\n        reason: SERVICE_POLICY_CHANGE_FREEZE\n"
    "      - id: main-only\n",
)


def executed(service: RunningService, api_key: str, body: dict[str, Any]) -> dict[str, Any]:
    response = execute(service, api_key, body)
    assert response.status_code == 200, response.text
    receipt: dict[str, Any] = response.json()
    return receipt


@pytest.fixture
def org(service: RunningService, tmp_path: Path) -> tuple[str, list[dict[str, Any]]]:
    """An org with the deploy policy and three stored executions: PERMIT, DENY, SILENCE."""
    org_id = new_org(service)
    assert push_policy(service, org_id, tmp_path, DEPLOY_POLICY).exit_code == 0
    api_key = issue_key(service, org_id)["api_key"]
    return org_id, [executed(service, api_key, body) for body in (PERMIT, DENY, SILENCE)]


def draft(tmp_path: Path, text: str = FREEZE, name: str = "deploys.yaml") -> str:
    path = tmp_path / "drafts" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return str(path)


def alter_recorded_decision(service: RunningService, execution_id: str, decision: str) -> None:
    with sqlite3.connect(service.workdir / "execauth.db") as db:
        db.execute(
            "UPDATE executions SET decision = ? WHERE execution_id = ?", (decision, execution_id)
        )


# --- range replay ----------------------------------------------------------------------


def test_replaying_a_range_without_mismatch_exits_0(
    service: RunningService, org: tuple[str, list[dict[str, Any]]]
) -> None:
    result = run(service, "replay", "--org", org[0])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "replayed 3, matched 3"


def test_replay_json_is_the_services_report(
    service: RunningService, org: tuple[str, list[dict[str, Any]]]
) -> None:
    report = run_json(service, "replay", "--org", org[0])
    assert report == {"replayed": 3, "matched": 3, "mismatches": []}


def test_since_and_until_bound_the_replayed_range(
    service: RunningService, org: tuple[str, list[dict[str, Any]]]
) -> None:
    first = org[1][0]["timestamp"]
    assert run_json(service, "replay", "--org", org[0], "--since", first)["replayed"] == 3
    assert run_json(service, "replay", "--org", org[0], "--until", first)["replayed"] == 0


def test_a_mismatch_exits_1_and_names_the_execution(
    service: RunningService, org: tuple[str, list[dict[str, Any]]]
) -> None:
    denied = org[1][1]
    alter_recorded_decision(service, denied["execution_id"], "PERMIT")
    result = run(service, "replay", "--org", org[0])
    assert result.exit_code == 1
    assert "replayed 3, matched 2" in result.stdout
    assert f"MISMATCH {denied['execution_id']}: recorded PERMIT" in result.stdout
    assert "replayed DENY (rule wrong-branch, reason SERVICE_POLICY_WRONG_BRANCH)" in result.stdout


def test_a_mismatch_exits_1_with_json_too(
    service: RunningService, org: tuple[str, list[dict[str, Any]]]
) -> None:
    alter_recorded_decision(service, org[1][2]["execution_id"], "DENY")
    result = run(service, "replay", "--org", org[0], "--json")
    assert result.exit_code == 1
    (mismatch,) = json.loads(result.stdout)["mismatches"]
    assert (mismatch["recorded"]["decision"], mismatch["replayed"]["decision"]) == (
        "DENY",
        "SILENCE",
    )


def test_an_unknown_org_exits_1(service: RunningService) -> None:
    result = run(service, "replay", "--org", "org_doesnotexist")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: not_found:")


def test_a_malformed_since_is_a_usage_error(service: RunningService) -> None:
    assert run(service, "replay", "--org", "org_x", "--since", "yesterday").exit_code == 2


# --- impact of a draft -----------------------------------------------------------------


def test_draft_impact_reports_decision_changes_and_rule_changes(
    service: RunningService, org: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    report = run_json(service, "replay", "--org", org[0], "--draft", draft(tmp_path))
    assert (report["evaluated"], report["changed"], report["rule_changed"]) == (3, 1, 1)
    (transition,) = report["transitions"]
    assert (transition["from"], transition["to"], transition["count"]) == ("PERMIT", "SILENCE", 1)
    assert transition["samples"][0]["execution_id"] == org[1][0]["execution_id"]
    assert transition["samples"][0]["after"]["reason"] == "SERVICE_POLICY_CONFLICT"
    (change,) = report["rule_changes"]
    assert change["samples"][0]["after"]["reason"] == "SERVICE_POLICY_CHANGE_FREEZE"


def test_draft_impact_prints_the_matrix_and_samples(
    service: RunningService, org: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    result = run(service, "replay", "--org", org[0], "--draft", draft(tmp_path))
    assert result.exit_code == 0, result.output
    assert "evaluated 3, decision would change for 1, same decision by another rule" in (
        result.stdout
    )
    assert "PERMIT → SILENCE: 1" in result.stdout
    assert f"{org[1][0]['execution_id']} (deploy.production; rule main-only → freeze" in (
        result.stdout
    )
    assert "DENY, another rule or reason: 1" in result.stdout


def test_the_draft_replaces_the_policy_named_by_policy_id(
    service: RunningService, org: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    path = draft(tmp_path, name="freeze-proposal.yaml")
    named = run_json(service, "replay", "--org", org[0], "--draft", path, "--policy-id", "deploys")
    assert named["changed"] == 1


def test_a_draft_whose_id_matches_no_published_policy_exits_1_saying_so(
    service: RunningService, org: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    # Under its file stem the draft would be a new policy beside deploys, and lose every
    # tie to it ("deploys" < "freeze-…"): a report of 0 changes would mislead.
    result = run(service, "replay", "--org", org[0], "--draft", draft(tmp_path, name="fz.yaml"))
    assert result.exit_code == 1
    assert "no published policy has the id 'fz' (published: deploys)" in result.stderr
    assert "evaluated" not in result.stdout


def test_new_previews_a_draft_as_a_new_policy(
    service: RunningService, org: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    path = draft(tmp_path, name="freeze-proposal.yaml")
    result = run(service, "replay", "--org", org[0], "--draft", path, "--new")
    assert result.exit_code == 0, result.output
    assert "draft freeze-proposal is a new policy" in result.stdout
    assert "decision would change for 0" in result.stdout


def test_the_drafts_own_policy_id_names_the_policy_it_replaces(
    service: RunningService, org: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    path = draft(tmp_path, "policy_id: deploys\n" + FREEZE, name="proposal.yaml")
    report = run_json(service, "replay", "--org", org[0], "--draft", path)
    assert (report["policy_id"], report["published_version"], report["changed"]) == (
        "deploys",
        1,
        1,
    )


def test_an_invalid_draft_exits_1_with_the_reason(
    service: RunningService, org: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    broken = draft(tmp_path, FREEZE.replace("deny: 'true'", "deny: '1 +'"))
    result = run(service, "replay", "--org", org[0], "--draft", broken)
    assert result.exit_code == 1
    assert "freeze" in result.stderr


def test_a_missing_draft_file_is_a_usage_error(service: RunningService, tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    assert run(service, "replay", "--org", "org_x", "--draft", missing).exit_code == 2


def test_impact_analysis_publishes_nothing(
    service: RunningService, org: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    run(service, "replay", "--org", org[0], "--draft", draft(tmp_path))
    (policy,) = run_json(service, "policy", "list", org[0])["policies"]
    assert policy["version"] == 1
