"""Fail closed: only an authentic, unexpired PERMIT for exactly this request lets work run."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from conftest import VECTORS_DIR, ScriptedService, Sleeps, read_json, receipt_for, standard_keys
from execauth_client import (
    AsyncClient,
    Client,
    NotPermitted,
    VerificationFailed,
    guarded,
    require_permit,
)


def vector(name: str) -> dict[str, Any]:
    receipt: dict[str, Any] = read_json(VECTORS_DIR / "cases" / f"{name}.json")["receipt"]
    return receipt


KEYS = standard_keys()


def make_client(service: ScriptedService) -> Client:
    return Client(
        "https://execauth.test", "k", transport=httpx.MockTransport(service), sleep=Sleeps()
    )


def make_async_client(service: ScriptedService) -> AsyncClient:
    return AsyncClient("https://execauth.test", "k", transport=httpx.MockTransport(service))


# --- require_permit(receipt, keys=...) ------------------------------------------------


def test_an_authentic_unexpired_permit_is_returned() -> None:
    receipt = require_permit(
        vector("permit-valid"), keys=KEYS, surface="deploy.production", actor="release-bot"
    )
    assert receipt.decision == "PERMIT"


@pytest.mark.parametrize("name", ["deny-valid", "silence-valid"])
def test_deny_and_silence_raise_not_permitted(name: str) -> None:
    with pytest.raises(NotPermitted) as raised:
        require_permit(vector(name), keys=KEYS)
    assert raised.value.receipt.decision in ("DENY", "SILENCE")


def test_an_expired_permit_raises_not_permitted() -> None:
    with pytest.raises(NotPermitted, match="expired"):
        require_permit(vector("permit-expired"), keys=KEYS)


@pytest.mark.parametrize(
    "name",
    [
        "tampered-deny-decision",
        "wrong-key",
        "revoked-key",
        "unknown-key",
        "permit-without-expires-at",
    ],
)
def test_an_inauthentic_receipt_raises_verification_failed(name: str) -> None:
    with pytest.raises(VerificationFailed) as raised:
        require_permit(vector(name), keys=KEYS)
    assert (
        raised.value.verdict.reason
        == read_json(VECTORS_DIR / "cases" / f"{name}.json")["expected"]["reason"]
    )


@pytest.mark.parametrize(("field", "value"), [("surface", "deploy.staging"), ("actor", "mallory")])
def test_a_permit_for_something_else_raises(field: str, value: str) -> None:
    expected: dict[str, str | None] = {"surface": None, "actor": None} | {field: value}
    with pytest.raises(VerificationFailed) as raised:
        require_permit(
            vector("permit-valid"), keys=KEYS, surface=expected["surface"], actor=expected["actor"]
        )
    assert raised.value.verdict.reason == "mismatch"


def test_a_receipt_that_is_not_an_object_raises() -> None:
    with pytest.raises(VerificationFailed):
        require_permit(["nope"], keys=KEYS)  # type: ignore[arg-type]


# --- client.require_permit -------------------------------------------------------------


def test_client_require_permit_returns_the_verified_permit(service: ScriptedService) -> None:
    with make_client(service) as c:
        receipt = c.require_permit(
            "deploy.production", actor="release-bot", context={"branch": "main"}
        )
    assert receipt.is_permit


def test_client_require_permit_raises_on_deny(service: ScriptedService) -> None:
    service.decision = "DENY"
    with make_client(service) as c, pytest.raises(NotPermitted):
        c.require_permit("deploy.production", actor="release-bot")


def test_client_require_permit_checks_the_request_digest(service: ScriptedService) -> None:
    def other_request(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) | {"context": {"branch": "evil"}}
        return httpx.Response(200, json=receipt_for(body))

    service.script = [other_request]
    with make_client(service) as c, pytest.raises(VerificationFailed, match="request_digest"):
        c.require_permit("deploy.production", actor="release-bot", context={"branch": "main"})


def test_client_require_permit_rejects_a_forged_permit(service: ScriptedService) -> None:
    def forged(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json=receipt_for(json.loads(request.content), key_name="unlisted")
        )

    service.script = [forged]
    with make_client(service) as c, pytest.raises(VerificationFailed) as raised:
        c.require_permit("deploy.production")
    assert raised.value.verdict.reason == "unknown_key"


# --- @guarded --------------------------------------------------------------------------


def test_guarded_runs_the_function_under_a_permit(service: ScriptedService) -> None:
    with make_client(service) as c:

        @guarded(
            c,
            surface="deploy.production",
            actor="release-bot",
            context_from=lambda branch: {"branch": branch},
        )
        def deploy(branch: str) -> str:
            return f"deployed {branch}"

        assert deploy("main") == "deployed main"
    assert service.bodies[0]["context"] == {"branch": "main"}
    assert deploy.__name__ == "deploy"


def test_guarded_does_not_run_the_function_on_deny(service: ScriptedService) -> None:
    service.decision = "DENY"
    ran = []
    with make_client(service) as c:

        @guarded(c, surface="deploy.production")
        def deploy() -> None:
            ran.append(True)

        with pytest.raises(NotPermitted):
            deploy()
    assert ran == []


def test_guarded_fails_closed_when_the_service_is_down(service: ScriptedService) -> None:
    service.script = [httpx.Response(503)] * 4
    ran = []
    with make_client(service) as c:

        @guarded(c, surface="deploy.production")
        def deploy() -> None:
            ran.append(True)

        with pytest.raises(Exception, match="503"):
            deploy()
    assert ran == []


@pytest.mark.anyio
async def test_guarded_async_function(service: ScriptedService) -> None:
    async with make_async_client(service) as c:

        @guarded(c, surface="tools.send_email", payload_from=lambda to, text: {"to": to})
        async def send_email(to: str, text: str) -> str:
            return f"sent to {to}"

        assert await send_email("ops@example.com", "hi") == "sent to ops@example.com"
        service.decision = "SILENCE"
        with pytest.raises(NotPermitted):
            await send_email("ops@example.com", "hi")
    assert service.bodies[0]["payload"] == {"to": "ops@example.com"}


def test_guarded_refuses_a_mismatched_client_kind(service: ScriptedService) -> None:
    sync_client = make_client(service)
    with pytest.raises(TypeError):

        @guarded(sync_client, surface="deploy.production")
        async def deploy() -> None: ...

    sync_client.close()
