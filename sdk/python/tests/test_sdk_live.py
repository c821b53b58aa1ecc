"""The SDK against a real ``execauth serve`` (SQLite in a temp dir): decisions, offline
verification, fail-closed helpers, both wire profiles and typed errors."""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from execauth_client import (
    AsyncClient,
    Client,
    InvalidRequest,
    NotPermitted,
    SurfaceNotFound,
    Unauthorized,
    guarded,
    require_permit,
)

serving = pytest.importorskip("tests.serving", reason="needs the execauth repository's tests/")
pytestmark = pytest.mark.e2e

POLICY = """
description: Production deploys
surfaces:
  - match: deploy.production
    require: [context.branch]
    rules:
      - id: main-only
        permit: context.branch == "main" && actor.startsWith("release-")
        ttl: 10m
      - id: wrong-branch
        deny: context.branch != "main"
        reason: SERVICE_POLICY_WRONG_BRANCH
        message: Only main can be deployed
"""
MAIN = {"branch": "main"}


@dataclass(frozen=True)
class Live:
    url: str
    admin_token: str
    workdir: Path
    env: dict[str, str]

    def new_key(self, wire_profile: str = "a") -> str:
        admin = {"Authorization": f"Bearer {self.admin_token}"}
        org = httpx.post(
            self.url + "/console/v1/orgs",
            json={"name": "SDK", "wire_profile": wire_profile},
            headers=admin,
        )
        assert org.status_code == 201, org.text
        org_id = org.json()["org_id"]
        key = httpx.post(
            f"{self.url}/console/v1/orgs/{org_id}/keys", json={"name": "sdk"}, headers=admin
        )
        policy = httpx.put(
            f"{self.url}/console/v1/orgs/{org_id}/policies/deploys", content=POLICY, headers=admin
        )
        assert policy.status_code == 201, policy.text
        api_key: str = key.json()["api_key"]
        return api_key


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    workdir = tmp_path_factory.mktemp("sdk-serve")
    port = serving.free_port()
    url = f"http://127.0.0.1:{port}"
    token = "service_admin_" + secrets.token_urlsafe(32)
    env = serving.clean_env(
        EXECAUTH_DATABASE_URL=f"sqlite:///{workdir / 'execauth.db'}",
        EXECAUTH_ISSUER=url,
        EXECAUTH_ADMIN_TOKEN=token,
        EXECAUTH_URL=url,
    )
    with serving.running_service(env, workdir, port):
        yield Live(url, token, workdir, env)


@pytest.fixture(scope="module")
def api_key(live: Live) -> str:
    return live.new_key()


@pytest.fixture
def client(live: Live, api_key: str) -> Iterator[Client]:
    with Client(live.url, api_key) as c:
        yield c


@pytest.mark.parametrize(
    ("context", "actor", "decision"),
    [
        (MAIN, "release-bot", "PERMIT"),
        ({"branch": "dev"}, "release-bot", "DENY"),
        (None, "release-bot", "SILENCE"),
    ],
)
def test_each_decision_is_a_receipt_that_verifies_offline(
    client: Client, live: Live, context: dict[str, str] | None, actor: str, decision: str
) -> None:
    receipt = client.authorize("deploy.production", actor=actor, context=context)
    assert receipt.decision == decision
    keys = httpx.get(live.url + "/.well-known/service-keys.json").json()
    verdict = receipt.verify(keys)
    assert verdict.authentic, verdict
    assert not verdict.expired
    assert client.verify(receipt).authentic


def test_the_idempotency_key_returns_the_same_receipt(client: Client) -> None:
    first = client.authorize(
        "deploy.production", actor="release-bot", context=MAIN, idempotency_key="sdk-live-1"
    )
    again = client.authorize(
        "deploy.production", actor="release-bot", context=MAIN, idempotency_key="sdk-live-1"
    )
    assert first.raw == again.raw
    assert first.request_id == "sdk-live-1"


def test_require_permit_returns_a_verified_permit(client: Client) -> None:
    receipt = client.require_permit(
        "deploy.production", actor="release-bot", context=MAIN, payload={"version": "1.2.3"}
    )
    assert receipt.is_permit
    assert receipt.expires_at is not None


def test_require_permit_raises_on_deny(client: Client) -> None:
    with pytest.raises(NotPermitted) as raised:
        client.require_permit("deploy.production", actor="release-bot", context={"branch": "dev"})
    assert raised.value.receipt.policy_reason == "SERVICE_POLICY_WRONG_BRANCH"


def test_require_permit_raises_on_silence(client: Client) -> None:
    with pytest.raises(NotPermitted, match="SERVICE_POLICY_MISSING_CONTEXT"):
        client.require_permit("deploy.production", actor="release-bot")


def test_offline_require_permit_with_a_saved_key_list(client: Client, live: Live) -> None:
    receipt = client.authorize("deploy.production", actor="release-bot", context=MAIN)
    keys = httpx.get(live.url + "/.well-known/service-keys.json").json()
    assert require_permit(receipt.raw, keys=keys, surface="deploy.production").is_permit


def test_guarded_runs_only_under_a_permit(client: Client) -> None:
    deployed: list[str] = []

    @guarded(
        client,
        surface="deploy.production",
        actor="release-bot",
        context_from=lambda branch: {"branch": branch},
    )
    def deploy(branch: str) -> None:
        deployed.append(branch)

    deploy("main")
    with pytest.raises(NotPermitted):
        deploy("dev")
    assert deployed == ["main"]


@pytest.mark.anyio
async def test_async_client_and_guarded_async_tool(live: Live, api_key: str) -> None:
    async with AsyncClient(live.url, api_key) as c:
        receipt = await c.require_permit("deploy.production", actor="release-bot", context=MAIN)
        assert receipt.is_permit

        @guarded(
            c,
            surface="deploy.production",
            actor="release-agent",
            context_from=lambda branch: {"branch": branch},
        )
        async def deploy_tool(branch: str) -> str:
            return "ok"

        assert await deploy_tool("main") == "ok"
        with pytest.raises(NotPermitted):
            await deploy_tool("dev")


@pytest.mark.parametrize(("profile", "statuses"), [("a", {200}), ("b", {403, 422})])
def test_deny_and_silence_are_receipts_in_both_profiles(
    live: Live, profile: str, statuses: set[int]
) -> None:
    key = live.new_key(wire_profile=profile)
    with Client(live.url, key) as c:
        deny = c.authorize("deploy.production", actor="release-bot", context={"branch": "dev"})
        silence = c.authorize("deploy.production", actor="release-bot")
        assert (deny.decision, silence.decision) == ("DENY", "SILENCE")
        assert c.verify(deny).authentic
        assert c.verify(silence).authentic
    raw = httpx.post(
        live.url + "/v1/execute",
        json={"surface": "deploy.production", "actor": "x"},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert raw.status_code in statuses


@pytest.mark.parametrize("profile", ["a", "b"])
def test_errors_are_typed_in_both_profiles(live: Live, profile: str) -> None:
    key = live.new_key(wire_profile=profile)
    with Client(live.url, key, max_retries=0) as c:
        with pytest.raises(SurfaceNotFound) as missing:
            c.authorize("payments.transfer")
        assert missing.value.status == 404
        with pytest.raises(InvalidRequest):
            c.authorize("Not A Surface")
    with Client(live.url, "service_live_wrong", max_retries=0) as c, pytest.raises(Unauthorized):
        c.authorize("deploy.production")


class RateLimitedOnce(httpx.BaseTransport):
    """In front of the real service: the first execute is answered 429, later ones pass.

    With ``after_decision`` the service has already decided and stored that first request
    when the 429 arrives (a proxy's limit, a lost answer): the hardest case for "one
    request, one receipt".
    """

    def __init__(self, *, after_decision: bool) -> None:
        self.inner = httpx.HTTPTransport()
        self.after_decision = after_decision
        self.execute_keys: list[str] = []
        self.replayed: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/execute":
            return self.inner.handle_request(request)
        self.execute_keys.append(request.headers["Idempotency-Key"])
        if len(self.execute_keys) > 1:
            response = self.inner.handle_request(request)
            self.replayed.append(response.headers.get("Idempotent-Replayed"))
            return response
        if self.after_decision:
            decided = self.inner.handle_request(request)
            decided.read()
            decided.close()
        return httpx.Response(
            429,
            json={"error": "rate_limited", "message": "slow down"},
            headers={"Retry-After": "1"},
        )

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize("after_decision", [False, True], ids=["before", "after-decision"])
def test_a_429_is_retried_with_the_same_idempotency_key_and_ends_in_one_receipt(
    live: Live, after_decision: bool
) -> None:
    transport = RateLimitedOnce(after_decision=after_decision)
    waits: list[float] = []
    with Client(live.url, live.new_key(), transport=transport, sleep=waits.append) as c:
        receipt = c.authorize("deploy.production", actor="release-bot", context=MAIN)
        assert c.verify(receipt).authentic
    assert receipt.decision == "PERMIT"
    assert waits == [1.0]  # Retry-After, honoured
    first, retry = transport.execute_keys
    assert first == retry == receipt.request_id
    assert transport.replayed == (["true"] if after_decision else [None])
    usage = httpx.get(
        f"{live.url}/console/v1/orgs/{receipt.org_id}/usage",
        headers={"Authorization": f"Bearer {live.admin_token}"},
    ).json()
    assert usage["executes"]["total"] == 1


def test_a_rotated_key_is_fetched_on_first_sight(live: Live) -> None:
    key = live.new_key()
    with Client(live.url, key) as c:
        c.keys()  # cache the list as it is before the rotation
        rotated = subprocess.run(
            [serving.EXECAUTH, "signing-keys", "rotate"],
            env=live.env,
            cwd=live.workdir,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert rotated.returncode == 0, rotated.stderr
        new_key_id = rotated.stdout.split()[3]
        receipt = c.authorize("deploy.production", actor="release-bot", context=MAIN)
        for _ in range(50):
            if receipt.key_id == new_key_id:
                break
            time.sleep(0.2)
            receipt = c.authorize("deploy.production", actor="release-bot", context=MAIN)
        assert receipt.key_id == new_key_id
        assert c.verify(receipt).authentic
