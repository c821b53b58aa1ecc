"""An organization manages its own policies: ``/operator/policies`` (the policy issue, item 6).

Its ``admin`` key publishes, ``auditor`` keys read, ``execute`` keys have no access; an
upload is read no further than the size limit, here and on the console (413).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from execauth.api.policy_routes import MAX_POLICY_BYTES
from tests.conftest import ADMIN, DEPLOY_POLICY
from tests.operator.conftest import Operators, make_operators

pytestmark = pytest.mark.anyio

EXTRA = """
surfaces:
  - match: deploy.canary
    rules:
      - id: anyone
        permit: "true"
"""
TYPO = """
surfaces:
  - match: deploy.canary
    rules:
      - id: from-main
        permit: contxt.branch == "main"
"""


async def publish(
    client: httpx.AsyncClient, headers: dict[str, str], policy_id: str, text: str
) -> httpx.Response:
    return await client.put(f"/operator/policies/{policy_id}", content=text, headers=headers)


async def test_an_org_admin_key_publishes_the_next_version(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    response = await publish(client, ops.admin, "deploys", DEPLOY_POLICY)
    assert response.status_code == 201, response.text
    assert (response.json()["policy_id"], response.json()["version"]) == ("deploys", 2)


async def test_a_policy_the_org_admin_publishes_governs_the_next_execute(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    assert (await publish(client, ops.admin, "canary", EXTRA)).status_code == 201
    body = {"surface": "deploy.canary", "actor": "anyone"}
    receipt = (await client.post("/v1/execute", json=body, headers=ops.tenant.auth)).json()
    assert (receipt["decision"], receipt["policy_id"]) == ("PERMIT", "canary")


async def test_an_auditor_key_cannot_publish(client: httpx.AsyncClient, ops: Operators) -> None:
    response = await publish(client, ops.auditor, "canary", EXTRA)
    assert response.status_code == 403


async def test_an_execute_key_cannot_read_policies(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    response = await client.get("/operator/policies", headers=ops.tenant.auth)
    assert response.status_code == 403


async def test_an_auditor_lists_the_latest_version_of_each_policy(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    await publish(client, ops.admin, "deploys", DEPLOY_POLICY)
    listed = (await client.get("/operator/policies", headers=ops.auditor)).json()["policies"]
    assert [(p["policy_id"], p["version"]) for p in listed] == [("deploys", 2)]


async def test_an_auditor_reads_one_version_with_its_source(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    await publish(client, ops.admin, "deploys", EXTRA.replace("canary", "production"))
    response = await client.get("/operator/policies/deploys?version=1", headers=ops.auditor)
    shown: dict[str, Any] = response.json()
    assert (shown["version"], shown["source"]) == (1, DEPLOY_POLICY)


@pytest.mark.parametrize("version", ["0", "x", "-1", "99999999999"])
async def test_a_malformed_version_is_400(
    client: httpx.AsyncClient, ops: Operators, version: str
) -> None:
    response = await client.get(f"/operator/policies/deploys?version={version}", headers=ops.admin)
    assert response.status_code == 400


async def test_a_missing_version_is_404(client: httpx.AsyncClient, ops: Operators) -> None:
    response = await client.get("/operator/policies/deploys?version=7", headers=ops.admin)
    assert response.status_code == 404


async def test_another_orgs_policy_is_not_found(client: httpx.AsyncClient, ops: Operators) -> None:
    await publish(client, ops.admin, "canary", EXTRA)
    other = await make_operators(client)
    response = await client.get("/operator/policies/canary", headers=other.admin)
    assert response.status_code == 404


async def test_publishing_is_audited_under_the_acting_key(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    await publish(client, ops.admin, "canary", EXTRA)
    latest = (await client.get("/operator/audit", headers=ops.auditor)).json()["events"][0]
    assert (latest["action"], latest["actor"], latest["target"]) == (
        "policy.published",
        f"key:{ops.admin_key_id}",
        "canary",
    )


async def test_a_misspelled_variable_is_400_naming_the_rule_the_line_and_the_name(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    response = await publish(client, ops.admin, "canary", TYPO)
    assert response.status_code == 400
    (detail,) = response.json()["details"]
    assert (detail["rule_id"], detail["line"]) == ("from-main", 6)
    assert "'contxt'" in detail["reason"]


# --- an upload is read no further than the limit (issue 16, item 13) ----------------------


class CountingBody(httpx.AsyncByteStream):
    """A body of ``total`` bytes with no Content-Length, counting what the server pulled."""

    def __init__(self, total: int, chunk: int = 64 * 1024) -> None:
        self.total, self.chunk, self.sent = total, chunk, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.sent < self.total:
            self.sent += self.chunk
            yield b"#" * self.chunk


@pytest.mark.parametrize("surface", ["operator", "console"])
async def test_an_oversized_upload_is_413_after_reading_at_most_the_limit(
    client: httpx.AsyncClient, ops: Operators, surface: str
) -> None:
    body = CountingBody(total=200 * 1024 * 1024)
    if surface == "operator":
        url, headers = "/operator/policies/big", ops.admin
    else:
        url, headers = f"/console/v1/orgs/{ops.tenant.org_id}/policies/big", ADMIN
    request = client.build_request("PUT", url, headers=headers)
    request.stream = body
    response = await client.send(request)
    assert response.status_code == 413
    assert body.sent <= MAX_POLICY_BYTES + body.chunk


async def test_a_declared_oversized_upload_is_413_before_reading_it(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    body = CountingBody(total=MAX_POLICY_BYTES + 1)
    request = client.build_request(
        "PUT",
        "/operator/policies/big",
        headers={**ops.admin, "Content-Length": str(MAX_POLICY_BYTES + 1)},
    )
    request.stream = body
    response = await client.send(request)
    assert response.status_code == 413
    assert body.sent <= body.chunk  # ASGI may pull one chunk before the app answers
