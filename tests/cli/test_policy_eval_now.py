"""``execauth policy eval`` decides at the current time unless ``--now`` names another."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from typer.testing import CliRunner

from execauth.cli import app
from execauth.wire_time import parse_timestamp, truncate_to_millis

COOKBOOK = Path(__file__).resolve().parents[2] / "examples" / "policies"
REQUEST = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


def evaluate(tmp_path: Path, *extra: str) -> datetime:
    request = tmp_path / "request.json"
    request.write_text(json.dumps(REQUEST))
    args = ["policy", "eval", str(COOKBOOK / "deploys.yaml"), "--request", str(request), "--json"]
    result = CliRunner().invoke(app, [*args, *extra])
    assert result.exit_code == 0, result.output
    return parse_timestamp(json.loads(result.stdout)["now"])


def test_policy_eval_decides_at_the_current_time_by_default(tmp_path: Path) -> None:
    before = truncate_to_millis(datetime.now(UTC))
    decided_at = evaluate(tmp_path)
    after = datetime.now(UTC)
    assert before <= decided_at <= after


def test_policy_eval_decides_at_the_time_now_names(tmp_path: Path) -> None:
    decided_at = evaluate(tmp_path, "--now", "2026-01-07T10:00:00Z")
    assert decided_at == datetime(2026, 1, 7, 10, tzinfo=UTC)
