"""The console's replay button writes lineage, so it needs an admin key (issue 16, item 10)."""

from __future__ import annotations

import httpx
import pytest

from tests.operator.conftest import Operators
from tests.web.conftest import secret_of, sign_in

pytestmark = pytest.mark.anyio

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


async def test_an_auditor_session_cannot_replay_an_execution(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    receipt = (await client.post("/v1/execute", json=PERMIT, headers=ops.tenant.auth)).json()
    assert (await sign_in(client, secret_of(ops.auditor))).status_code == 303
    path = f"/console/executions/{receipt['execution_id']}"
    page = await client.get(path)
    assert "needs an admin key" in page.text
    csrf = page.text.split('name="csrf_token" value="')[1].split('"')[0]
    replayed = await client.post(path + "/replay", data={"csrf_token": csrf})
    assert replayed.status_code == 403
    lineage = (await client.get(f"/operator/executions/{receipt['execution_id']}",
                                headers=ops.admin)).json()["lineage"]  # fmt: skip
    assert lineage == []
