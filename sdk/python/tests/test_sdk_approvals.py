"""authorize(..., wait_for_approval=...) against a real ``execauth serve`` while a second
client approves or rejects; ESCALATE never passes the fail-closed helpers."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from execauth_client import Client, NotPermitted

serving = pytest.importorskip("tests.serving", reason="needs the execauth repository's tests/")
pytestmark = pytest.mark.e2e

POLICY = """
surfaces:
  - match: deploy.production
    rules:
      - id: a-person-decides
        escalate: "true"
        ttl: 5m
"""
BODY: dict[str, Any] = {"actor": "release-bot", "context": {"ticket": "CHG-1"}}


@dataclass(frozen=True)
class Org:
    url: str
    requester: str
    approver: str


@pytest.fixture(scope="module")
def org(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Org]:
    workdir = tmp_path_factory.mktemp("sdk-approvals")
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
        admin = {"Authorization": f"Bearer {token}"}
        org_id = httpx.post(url + "/console/v1/orgs", json={"name": "A"}, headers=admin).json()[
            "org_id"
        ]
        keys = [
            httpx.post(
                f"{url}/console/v1/orgs/{org_id}/keys", json={"name": n, "role": r}, headers=admin
            ).json()["api_key"]
            for n, r in (("ci", "execute"), ("lead", "admin"))
        ]
        published = httpx.put(
            f"{url}/console/v1/orgs/{org_id}/policies/deploys", content=POLICY, headers=admin
        )
        assert published.status_code == 201, published.text
        yield Org(url, keys[0], keys[1])


def _vote_soon(org: Org, approval_id: str, verb: str) -> threading.Thread:
    def vote() -> None:
        time.sleep(0.5)
        httpx.post(
            f"{org.url}/operator/approvals/{approval_id}/{verb}",
            json={"reason": "checked"},
            headers={"Authorization": f"Bearer {org.approver}"},
        ).raise_for_status()

    thread = threading.Thread(target=vote)
    thread.start()
    return thread


def test_without_waiting_the_answer_is_the_escalate_receipt(org: Org) -> None:
    with Client(org.url, org.requester) as client:
        receipt = client.authorize("deploy.production", **BODY)
        assert receipt.decision == "ESCALATE"
        assert receipt.approval_id is not None
        assert client.verify(receipt).authentic


def test_require_permit_refuses_an_escalate(org: Org) -> None:
    with Client(org.url, org.requester) as client, pytest.raises(NotPermitted):
        client.require_permit("deploy.production", **BODY)


def test_waiting_returns_the_linked_permit_once_approved(org: Org) -> None:
    key = "wait-" + secrets.token_hex(4)
    with Client(org.url, org.requester) as client:
        first = client.authorize("deploy.production", idempotency_key=key, **BODY)
        assert first.approval_id is not None
        voter = _vote_soon(org, first.approval_id, "approve")
        permit = client.require_permit(
            "deploy.production", idempotency_key=key, wait_for_approval=20, **BODY
        )
        voter.join()
        assert permit.decision == "PERMIT"
        assert permit.approval_id == first.approval_id
        assert len(client.verify(permit).approvers) == 1


def test_waiting_on_a_rejection_fails_closed(org: Org) -> None:
    key = "reject-" + secrets.token_hex(4)
    with Client(org.url, org.requester) as client:
        first = client.authorize("deploy.production", idempotency_key=key, **BODY)
        assert first.approval_id is not None
        voter = _vote_soon(org, first.approval_id, "reject")
        with pytest.raises(NotPermitted):
            client.require_permit(
                "deploy.production", idempotency_key=key, wait_for_approval=20, **BODY
            )
        voter.join()


def test_waiting_past_the_deadline_returns_the_escalate(org: Org) -> None:
    with Client(org.url, org.requester) as client:
        receipt = client.authorize("deploy.production", wait_for_approval=1, **BODY)
        assert receipt.decision == "ESCALATE"
