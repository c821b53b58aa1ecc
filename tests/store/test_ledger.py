"""The per-organization Merkle logs (docs/ledger.md), checked by an independent path.

The RFC 9162 hashing and proof verification below are written out in the test
(from the RFC's algorithms), not imported from ``execauth.ledger``: a bug shared
by the code and its test could otherwise hide.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_der_public_key
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError

from execauth.serving.runtime import Runtime
from execauth.store.ledger import sequence_pending
from execauth.store.tables import log_leaves
from tests.conftest import Tenant, make_tenant, proof, sequence

pytestmark = pytest.mark.anyio
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
UNSIGNED = {"signature", "authoritySignature", "receiptHash"}


# --- RFC 9162, written out -------------------------------------------------------------
def leaf(receipt: dict[str, Any]) -> bytes:
    payload = rfc8785.dumps({k: v for k, v in receipt.items() if k not in UNSIGNED})
    return hashlib.sha256(b"\x00" + payload).digest()


def node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def mth(leaves: list[bytes]) -> bytes:
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return node(mth(leaves[:k]), mth(leaves[k:]))


def root_from_inclusion(index: int, size: int, leaf_hash: bytes, path: list[bytes]) -> bytes:
    """RFC 9162 §2.1.3.2."""
    fn, sn, r = index, size - 1, leaf_hash
    for p in path:
        assert sn != 0
        if fn & 1 or fn == sn:
            r = node(p, r)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node(r, p)
        fn >>= 1
        sn >>= 1
    assert sn == 0
    return r


def roots_from_consistency(
    first: int, second: int, first_root: bytes, path: list[bytes]
) -> tuple[bytes, bytes]:
    """RFC 9162 §2.1.4.2: (computed first root, computed second root)."""
    if first & (first - 1) == 0:  # a power of two: the old root starts the path
        path = [first_root, *path]
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        assert sn != 0
        if fn & 1 or fn == sn:
            fr, sr = node(c, fr), node(c, sr)
            while fn & 1 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node(sr, c)
        fn >>= 1
        sn >>= 1
    assert sn == 0
    return fr, sr


# --- helpers -------------------------------------------------------------------------
async def receipts(client: httpx.AsyncClient, tenant: Tenant, count: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(count):
        response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
        assert response.status_code == 200
        out.append(response.json())
    return out


def note_parts(note: str) -> tuple[str, int, bytes, list[str]]:
    body, _, signatures = note.partition("\n\n")
    origin, size, root = body.split("\n")
    return origin, int(size), base64.b64decode(root), signatures.strip("\n").split("\n")


# --- tests ---------------------------------------------------------------------------
async def test_a_receipt_is_pending_until_sequenced(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    (receipt,) = await receipts(client, tenant, 1)
    response = await proof(client, tenant, receipt["receipt_id"])
    assert response.status_code == 202
    assert response.json() == {"status": "pending"}
    assert int(response.headers["retry-after"]) >= 1


async def test_receipts_get_contiguous_indexes_in_their_orgs_log(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    made = await receipts(client, tenant, 5)
    assert sequence(client) == 5
    indexes = [(await proof(client, tenant, r["receipt_id"])).json()["log_index"] for r in made]
    assert sorted(indexes) == [0, 1, 2, 3, 4]


async def test_sequenced_at_is_stored_as_every_other_utc_timestamp(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime
) -> None:
    # The sequencer writes its rows through the driver; the column must still hold what
    # SQLAlchemy writes for a UTC datetime (on SQLite: text with six fraction digits,
    # also for a whole second) and read back as that aware datetime.
    await receipts(client, tenant, 2)
    whole_second = datetime(2026, 11, 23, 14, 0, 0, tzinfo=UTC)
    with runtime.engine.begin() as conn:
        sequenced = sequence_pending(conn, limit=10, now=whole_second, sign=lambda *_: "note")
    assert len(sequenced) == 2
    with runtime.engine.connect() as conn:
        stored = conn.execute(select(log_leaves.c.sequenced_at)).scalars().all()
        raw = conn.exec_driver_sql("SELECT sequenced_at FROM log_leaves").scalars().all()
    assert stored == [whole_second, whole_second]
    if runtime.engine.dialect.name == "sqlite":
        assert raw == ["2026-11-23 14:00:00.000000"] * 2


async def test_each_org_has_its_own_log(client: httpx.AsyncClient, tenant: Tenant) -> None:
    other = await make_tenant(client)
    await receipts(client, tenant, 3)
    (theirs,) = await receipts(client, other, 1)
    sequence(client)
    assert (await proof(client, other, theirs["receipt_id"])).json()["log_index"] == 0


async def test_the_leaf_hash_covers_the_receipts_signed_payload(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    (receipt,) = await receipts(client, tenant, 1)
    sequence(client)
    body = (await proof(client, tenant, receipt["receipt_id"])).json()
    assert bytes.fromhex(body["leaf_hash"]) == leaf(receipt)


@pytest.mark.parametrize("count", [1, 2, 3, 7, 8, 13])
async def test_every_inclusion_proof_leads_to_the_checkpoint_root(
    client: httpx.AsyncClient, tenant: Tenant, count: int
) -> None:
    made = await receipts(client, tenant, count)
    sequence(client)
    for receipt in made:
        body = (await proof(client, tenant, receipt["receipt_id"])).json()
        _, size, root, _ = note_parts(body["checkpoint"])
        path = [bytes.fromhex(h) for h in body["inclusion_path"]]
        assert size == body["tree_size"] == count
        assert root_from_inclusion(body["log_index"], size, leaf(receipt), path) == root


async def test_the_checkpoint_root_is_the_rfc9162_root_of_the_log(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    made = await receipts(client, tenant, 6)
    sequence(client)
    checkpoint = (await client.get("/operator/log/checkpoint", headers=tenant.auth)).json()
    by_index = sorted(
        [
            ((await proof(client, tenant, r["receipt_id"])).json()["log_index"], leaf(r))
            for r in made
        ]
    )
    assert bytes.fromhex(checkpoint["root_hash"]) == mth([h for _, h in by_index])
    assert checkpoint["tree_size"] == 6


async def test_the_checkpoint_is_a_signed_note_verifiable_with_the_published_key(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await receipts(client, tenant, 2)
    sequence(client)
    note = (await client.get("/operator/log/checkpoint", headers=tenant.auth)).json()["checkpoint"]
    origin, size, _, (signature_line,) = note_parts(note)
    assert origin == f"execauth.test/log/{tenant.org_id}"
    assert size == 2
    dash, name, blob = signature_line.split(" ")
    assert (dash, name) == ("\u2014", origin)
    raw = base64.b64decode(blob)
    (entry,) = (await client.get("/.well-known/service-keys.json")).json()["keys"]
    public = load_der_public_key(base64.b64decode(entry["public_key"]))
    assert isinstance(public, Ed25519PublicKey)
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    raw_public = public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    key_hash = hashlib.sha256(origin.encode() + b"\n\x01" + raw_public).digest()[:4]
    assert raw[:4] == key_hash
    public.verify(raw[4:], note.partition("\n\n")[0].encode() + b"\n")


async def test_consistency_proofs_link_an_old_checkpoint_to_a_new_one(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await receipts(client, tenant, 3)
    sequence(client)
    old = (await client.get("/operator/log/checkpoint", headers=tenant.auth)).json()
    await receipts(client, tenant, 6)
    sequence(client)
    new = (await client.get("/operator/log/checkpoint", headers=tenant.auth)).json()
    body = (
        await client.get(
            "/operator/log/consistency", params={"from": 3, "to": 9}, headers=tenant.auth
        )
    ).json()
    path = [bytes.fromhex(h) for h in body["consistency_path"]]
    first, second = roots_from_consistency(3, 9, bytes.fromhex(old["root_hash"]), path)
    assert first == bytes.fromhex(old["root_hash"])
    assert second == bytes.fromhex(new["root_hash"])


@pytest.mark.parametrize(
    "params", [{"from": 0, "to": 1}, {"from": 2, "to": 1}, {"from": 1, "to": 99}, {"from": "x"}]
)
async def test_impossible_consistency_ranges_are_400(
    client: httpx.AsyncClient, tenant: Tenant, params: dict[str, str | int]
) -> None:
    await receipts(client, tenant, 2)
    sequence(client)
    response = await client.get("/operator/log/consistency", params=params, headers=tenant.auth)
    assert response.status_code == 400


async def test_another_orgs_receipt_has_no_proof_here(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    other = await make_tenant(client)
    (receipt,) = await receipts(client, tenant, 1)
    sequence(client)
    assert (await proof(client, other, receipt["receipt_id"])).status_code == 404


async def test_a_failed_batch_leaves_nothing_half_sequenced(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime
) -> None:
    await receipts(client, tenant, 3)

    def broken_signer(org_id: str, size: int, root: bytes) -> str:
        raise RuntimeError("signing failed mid-batch")

    from datetime import UTC, datetime

    with pytest.raises(RuntimeError):
        runtime.logs.sequence_batch(limit=100, now=datetime.now(UTC), sign=broken_signer)
    with runtime.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM log_leaves")).scalar_one() == 0
    assert sequence(client) == 3


async def test_concurrent_sequencers_never_duplicate_or_skip_an_index(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime
) -> None:
    await receipts(client, tenant, 40)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            sequence(client)
        except Exception as exc:  # a loser's rolled-back batch is allowed, a gap is not
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sequence(client)
    with runtime.engine.connect() as conn:
        indexes = (
            conn.execute(
                text("SELECT log_index FROM log_leaves WHERE org_id = :o ORDER BY log_index"),
                {"o": tenant.org_id},
            )
            .scalars()
            .all()
        )
    assert list(indexes) == list(range(40))


@pytest.mark.parametrize("table", ["log_leaves", "log_nodes", "log_checkpoints"])
async def test_the_log_tables_refuse_changes(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime, table: str
) -> None:
    await receipts(client, tenant, 2)
    sequence(client)
    with pytest.raises(DBAPIError), runtime.engine.begin() as conn:
        conn.execute(text(f"DELETE FROM {table}"))
