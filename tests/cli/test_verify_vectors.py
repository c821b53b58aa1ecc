"""``execauth verify --json`` reaches the expected verdict on every shared test vector.

The CLI reads the real clock; the vectors are built so their verdicts hold for any
clock between 2025-06-01T12:10Z and 2099 (testdata/vectors/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from execauth.cli import app
from tests.test_vectors import VECTORS, VectorCase


@pytest.mark.parametrize("case", VECTORS, ids=[case.name for case in VECTORS])
def test_cli_verify_agrees_with_the_vector(case: VectorCase, tmp_path: Path) -> None:
    receipt_file = tmp_path / "receipt.json"
    receipt_file.write_text(json.dumps(case.receipt), encoding="utf-8")
    result = CliRunner().invoke(
        app, ["verify", str(receipt_file), "--keys", str(case.keys_path), "--json"]
    )
    assert result.exit_code == case.expected["exit_code"], result.output
    verdict = json.loads(result.stdout)
    got = {k: verdict[k] for k in ("authentic", "reason", "expired", "decision", "key_id")}
    assert got == {k: case.expected[k] for k in got}
    assert verdict["status"] == (
        "VALID"
        if case.expected["exit_code"] == 0
        else "EXPIRED"
        if case.expected["expired"]
        else "INVALID"
    )
