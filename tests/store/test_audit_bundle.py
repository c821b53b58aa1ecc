"""Audit bundles (the ledger issue, item 5): exported by the service, verified offline.

Each tampering an operator could attempt — edit, delete, reorder, rewrite
history — must make ``verify_bundle`` (and ``execauth audit verify``) fail.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from execauth.cli import app as cli
from execauth.ledger.bundle import BundleError, verify_bundle
from execauth.ledger.checkpoint import Checkpoint, sign_checkpoint
from execauth.ledger.merkle import merkle_root
from execauth.serving.runtime import Runtime
from tests.conftest import ADMIN, Tenant, sequence
from tests.store.test_ledger import receipts

pytestmark = pytest.mark.anyio
NOW = datetime.now(UTC)


async def exported(client: httpx.AsyncClient, tenant: Tenant, count: int) -> dict[str, Any]:
    await receipts(client, tenant, count)
    sequence(client)
    response = await client.get(f"/console/v1/orgs/{tenant.org_id}/export", headers=ADMIN)
    assert response.status_code == 200
    bundle: dict[str, Any] = response.json()
    return bundle


async def test_a_fresh_bundle_verifies(client: httpx.AsyncClient, tenant: Tenant) -> None:
    bundle = await exported(client, tenant, 5)
    report = verify_bundle(bundle, now=NOW)
    assert report.failures == []
    assert report.receipts_checked == 5
    assert bundle["tree_size"] == len(bundle["leaf_hashes"]) == 5


async def test_an_edited_receipt_fails(client: httpx.AsyncClient, tenant: Tenant) -> None:
    bundle = await exported(client, tenant, 3)
    bundle["receipts"][1]["receipt"]["actor"] = "mallory"
    assert not verify_bundle(bundle, now=NOW).ok


async def test_a_deleted_receipt_shows_as_a_gap(client: httpx.AsyncClient, tenant: Tenant) -> None:
    bundle = await exported(client, tenant, 4)
    del bundle["receipts"][2]
    report = verify_bundle(bundle, now=NOW)
    assert any("not contiguous" in failure for failure in report.failures)


async def test_a_receipt_moved_to_another_index_fails(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    bundle = await exported(client, tenant, 4)
    first, second = bundle["receipts"][0], bundle["receipts"][1]
    first["receipt"], second["receipt"] = second["receipt"], first["receipt"]
    assert not verify_bundle(bundle, now=NOW).ok


async def test_rewritten_history_does_not_match_the_signed_checkpoint(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    bundle = await exported(client, tenant, 4)
    bundle["leaf_hashes"][0] = "00" * 32
    report = verify_bundle(bundle, now=NOW)
    assert any("root" in failure for failure in report.failures)


async def test_a_bundle_is_consistent_with_an_earlier_trusted_checkpoint(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    earlier = await exported(client, tenant, 3)
    later = await exported(client, tenant, 4)
    report = verify_bundle(later, now=NOW, trusted_checkpoint=earlier["checkpoint"])
    assert report.ok
    assert any("consistent with the trusted checkpoint at size 3" in n for n in report.notes)


async def test_a_log_rolled_back_behind_the_trusted_checkpoint_fails(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    # A database restored from a backup taken at size 3, after an auditor saw size 5.
    restored = await exported(client, tenant, 3)
    seen = await exported(client, tenant, 2)
    report = verify_bundle(restored, now=NOW, trusted_checkpoint=seen["checkpoint"])
    assert any(f.startswith("ROLLED BACK") for f in report.failures), report.failures


async def test_a_forked_history_is_caught_by_the_trusted_checkpoint(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime
) -> None:
    bundle = await exported(client, tenant, 4)
    # An operator with the signing key shows an auditor one history, then another.
    forked_leaves = [bytes.fromhex(h) for h in bundle["leaf_hashes"][:2]]
    forked_leaves[1] = b"\x11" * 32
    signer = runtime.keyring.signer(datetime.now(UTC))
    origin = bundle["origin"]
    forked = sign_checkpoint(
        Checkpoint(origin, 2, merkle_root(forked_leaves)),
        [(origin, runtime.keyring.public_key(signer.key_id), signer.sign)],
    )
    report = verify_bundle(bundle, now=NOW, trusted_checkpoint=forked)
    assert any(failure.startswith("INCONSISTENT") for failure in report.failures)


async def test_a_checkpoint_signed_by_an_unpublished_key_fails(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    bundle = await exported(client, tenant, 2)
    strangers = copy.deepcopy(bundle["key_list"])
    strangers["keys"] = []
    report = verify_bundle(bundle, now=NOW, keys_document=strangers)
    assert any("does not verify" in failure for failure in report.failures)


def test_a_file_that_is_not_a_bundle_is_a_usage_error() -> None:
    with pytest.raises(BundleError):
        verify_bundle({"receipts": []}, now=NOW)


async def test_audit_verify_exits_0_1_2(
    client: httpx.AsyncClient, tenant: Tenant, tmp_path: Path
) -> None:
    bundle = await exported(client, tenant, 3)
    good, bad, junk = tmp_path / "good.json", tmp_path / "bad.json", tmp_path / "junk.json"
    good.write_text(json.dumps(bundle))
    bundle["receipts"][0]["receipt"]["decision"] = "PERMIT"
    bundle["receipts"][0]["receipt"]["surface"] = "deploy.staging"
    bad.write_text(json.dumps(bundle))
    junk.write_text("{}")
    runner = CliRunner()
    assert runner.invoke(cli, ["audit", "verify", str(good)]).exit_code == 0
    failed = runner.invoke(cli, ["audit", "verify", str(bad)])
    assert failed.exit_code == 1
    assert "INVALID" in failed.output
    assert runner.invoke(cli, ["audit", "verify", str(junk)]).exit_code == 2


async def test_audit_verify_takes_a_saved_note_with_an_extra_final_newline(
    client: httpx.AsyncClient, tenant: Tenant, tmp_path: Path
) -> None:
    bundle = await exported(client, tenant, 2)
    bundle_file, saved = tmp_path / "bundle.json", tmp_path / "saved.checkpoint"
    bundle_file.write_text(json.dumps(bundle))
    saved.write_text(bundle["checkpoint"] + "\n")  # as `sqlite3 … > saved.checkpoint` writes it
    result = CliRunner().invoke(
        cli, ["audit", "verify", str(bundle_file), "--trusted-checkpoint", str(saved)]
    )
    assert result.exit_code == 0, result.output
