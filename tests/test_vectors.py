"""The shared receipt test vectors (testdata/vectors/): the server's verifier agrees with each.

The same files are run by ``execauth verify`` (tests/cli/test_verify_vectors.py), the
Python SDK (sdk/python/tests) and the TypeScript SDK; every verifier must agree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from execauth.verify import parse_key_list, verify_receipt
from execauth.wire_time import parse_timestamp
from tests.module_files import load_module_file

ROOT = Path(__file__).resolve().parent.parent
VECTORS_DIR = ROOT / "testdata" / "vectors"


@dataclass(frozen=True)
class VectorCase:
    name: str
    path: Path
    keys_path: Path
    now: str
    receipt: Any
    expected: dict[str, Any]


def load_vectors() -> list[VectorCase]:
    """Every vector listed in index.json, with its key-list path resolved."""
    index = json.loads((VECTORS_DIR / "index.json").read_text(encoding="utf-8"))
    cases = []
    for entry in index["vectors"]:
        path = VECTORS_DIR / entry["file"]
        document = json.loads(path.read_text(encoding="utf-8"))
        cases.append(
            VectorCase(
                name=document["name"],
                path=path,
                keys_path=VECTORS_DIR / document["keys"],
                now=document["now"],
                receipt=document["receipt"],
                expected=document["expected"],
            )
        )
    return cases


VECTORS = load_vectors()


def _generator() -> ModuleType:
    return load_module_file("generate_vectors", ROOT / "scripts" / "generate_vectors.py")


def test_there_are_vectors_for_every_reason_code() -> None:
    reasons = {case.expected["reason"] for case in VECTORS}
    assert reasons == {
        "valid",
        "malformed_receipt",
        "signature_fields_disagree",
        "unknown_key",
        "revoked_key",
        "key_not_valid_at_timestamp",
        "issuer_mismatch",
        "bad_signature",
        "receipt_hash_mismatch",
    }
    assert any(case.expected["expired"] for case in VECTORS)


@pytest.mark.parametrize("case", VECTORS, ids=[case.name for case in VECTORS])
def test_server_verifier_agrees_with_the_vector(case: VectorCase) -> None:
    keys, issuer = parse_key_list(json.loads(case.keys_path.read_text(encoding="utf-8")))
    verdict = verify_receipt(case.receipt, keys, now=parse_timestamp(case.now), issuer=issuer)
    got = {
        "authentic": verdict.authentic,
        "reason": verdict.reason,
        "expired": verdict.expired,
        "decision": verdict.decision,
        "key_id": verdict.key_id,
        "exit_code": 0 if verdict.usable else 1,
    }
    assert got == case.expected, verdict.detail


def test_committed_vectors_equal_a_fresh_generation() -> None:
    generator = _generator()
    fresh: dict[str, bytes] = generator.build_files()
    committed: set[str] = generator.generated_paths(VECTORS_DIR)
    assert committed == set(fresh), "run scripts/generate_vectors.py (files added or removed)"
    stale = [p for p, data in fresh.items() if (VECTORS_DIR / p).read_bytes() != data]
    assert not stale, f"edited by hand or stale; run scripts/generate_vectors.py: {stale}"


def test_generation_is_deterministic() -> None:
    generator = _generator()
    assert generator.build_files() == generator.build_files()
