"""Shared helpers: the repository's test vectors and a scripted in-memory service.

The scripted service signs receipts with the TEST ONLY primary key of
testdata/vectors/keys/test-keys.json and serves keylists/standard.json, so unit tests
exercise real signatures without a server.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

REPO_ROOT = Path(__file__).resolve().parents[3]
VECTORS_DIR = REPO_ROOT / "testdata" / "vectors"
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))  # for tests/serving.py in the live tests

ISSUER = "https://execauth.test"


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def vector_key(name: str) -> tuple[str, Ed25519PrivateKey]:
    """A TEST ONLY key from the vectors: (key_id, private key)."""
    for key in read_json(VECTORS_DIR / "keys" / "test-keys.json")["keys"]:
        if key["name"] == name:
            return key["key_id"], Ed25519PrivateKey.from_private_bytes(
                bytes.fromhex(key["seed_hex"])
            )
    raise KeyError(name)


def standard_keys() -> dict[str, Any]:
    document: dict[str, Any] = read_json(VECTORS_DIR / "keylists" / "standard.json")
    return document


def sign(unsigned: dict[str, Any], key_name: str = "primary") -> dict[str, Any]:
    key_id, private_key = vector_key(key_name)
    receipt = dict(unsigned, key_id=key_id)
    payload = rfc8785.dumps(receipt)
    signature = "ed25519:" + base64.b64encode(private_key.sign(payload)).decode()
    return receipt | {
        "signature": signature,
        "authoritySignature": signature,
        "receiptHash": "sha256:" + hashlib.sha256(payload).hexdigest(),
    }


def digest_of(body: dict[str, Any]) -> str:
    normalized = {
        "surface": body["surface"],
        "action": body.get("action"),
        "actor": body.get("actor"),
        "context": body.get("context", {}),
        "payload": body.get("payload", {}),
    }
    return "sha256:" + hashlib.sha256(rfc8785.dumps(normalized)).hexdigest()


def receipt_for(
    body: dict[str, Any], decision: str = "PERMIT", *, key_name: str = "primary", **overrides: Any
) -> dict[str, Any]:
    """A signed receipt answering execute ``body`` as the service would."""
    unsigned: dict[str, Any] = {
        "receipt_id": "service_rcpt_0123456789abcdef",
        "execution_id": "service_exec_01JX0000000000000000000000",
        "decision": decision,
        "enforcement": "EXECUTED" if decision == "PERMIT" else "BLOCKED",
        "surface": body["surface"],
    }
    for name in ("action", "actor"):
        if body.get(name) is not None:
            unsigned[name] = body[name]
    unsigned |= {
        "org_id": "org_01j00000000000000000000000",
        "issuer": ISSUER,
        "timestamp": "2025-06-01T12:00:00.000Z",
    }
    if decision == "PERMIT":
        unsigned["expires_at"] = "2099-01-01T00:00:00.000Z"
    unsigned |= {
        "policy_id": "deploys",
        "policy_version": 1,
        "policy_hash": "sha256:" + "a" * 64,
        "rule_id": "main-only" if decision != "SILENCE" else None,
    }
    if decision != "PERMIT":
        unsigned |= {
            "reason_code": "POLICY_VIOLATION" if decision == "DENY" else "INDETERMINATE_EVALUATION",
            "reasonCode": "SERVICE_POLICY_WRONG_BRANCH",
            "message": "Only main can be deployed",
        }
    unsigned |= {"request_id": body.get("idempotency_key"), "request_digest": digest_of(body)}
    return sign(unsigned | overrides, key_name)


Handler = Callable[[httpx.Request], httpx.Response]


@dataclass
class ScriptedService:
    """Answers execute calls from a script (or with a signed PERMIT) and serves keys."""

    script: list[Handler | httpx.Response | Exception] = field(default_factory=list)
    keys: dict[str, Any] = field(default_factory=standard_keys)
    decision: str = "PERMIT"
    requests: list[httpx.Request] = field(default_factory=list)
    key_fetches: int = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/.well-known/service-keys.json":
            self.key_fetches += 1
            return httpx.Response(200, json=self.keys)
        self.requests.append(request)
        if self.script:
            step = self.script.pop(0)
            if isinstance(step, Exception):
                raise step
            return step if isinstance(step, httpx.Response) else step(request)
        return httpx.Response(200, json=receipt_for(json.loads(request.content), self.decision))

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]


@pytest.fixture
def service() -> ScriptedService:
    return ScriptedService()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Sleeps:
    """A sleep function that records instead of sleeping."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)

    async def async_sleep(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()
