"""The audit trail (docs/api.md): every control-plane action, who did it, when; append-only."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
from sqlalchemy import delete, update
from sqlalchemy.exc import DBAPIError

from execauth.keyring import ROTATION_OVERLAP, generate_signing_key
from execauth.serving.runtime import Runtime
from execauth.store.tables import audit_events
from tests.conftest import ADMIN, DEPLOY_POLICY
from tests.operator.conftest import Operators

pytestmark = pytest.mark.anyio


async def trail(client: httpx.AsyncClient, headers: dict[str, str]) -> list[dict[str, object]]:
    response = await client.get("/operator/audit", params={"limit": 500}, headers=headers)
    assert response.status_code == 200, response.text
    events: list[dict[str, object]] = response.json()["events"]
    return events


def actions(events: list[dict[str, object]]) -> list[object]:
    return [event["action"] for event in reversed(events)]  # oldest first


async def test_org_setup_is_in_the_trail_in_order(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    assert actions(await trail(client, ops.auditor)) == [
        "signing_key.created",  # service-wide, by the first start
        "org.created",
        "api_key.issued",
        "policy.published",
        "api_key.issued",
        "api_key.issued",
    ]


async def test_console_actions_are_attributed_to_the_platform_admin(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    events = await trail(client, ops.auditor)
    org_events = [event for event in events if event["org_id"] is not None]
    assert {event["actor"] for event in org_events} == {"platform-admin"}


async def test_plan_change_records_from_and_to(client: httpx.AsyncClient, ops: Operators) -> None:
    await client.patch(
        f"/console/v1/orgs/{ops.tenant.org_id}", json={"plan": "standard"}, headers=ADMIN
    )
    (latest, *_) = await trail(client, ops.auditor)
    assert latest["action"] == "org.plan_changed"
    assert latest["details"] == {"plan": {"from": "free", "to": "standard"}}


async def test_operator_key_actions_name_the_acting_key(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    await client.post(f"/operator/keys/{ops.tenant.key_id}/rotate", headers=ops.admin)
    await client.delete(f"/operator/keys/{ops.tenant.key_id}", headers=ops.admin)
    revoked, rotated, *_ = await trail(client, ops.auditor)
    assert (rotated["action"], revoked["action"]) == ("api_key.rotated", "api_key.revoked")
    assert rotated["actor"] == revoked["actor"] == f"key:{ops.admin_key_id}"
    assert rotated["target"] == revoked["target"] == ops.tenant.key_id


async def test_republishing_a_policy_records_its_new_version(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    await client.put(
        f"/console/v1/orgs/{ops.tenant.org_id}/policies/deploys",
        content=DEPLOY_POLICY,
        headers=ADMIN,
    )
    (latest, *_) = await trail(client, ops.auditor)
    assert latest["action"] == "policy.published"
    assert latest["details"]["version"] == 2  # type: ignore[index]


async def test_signing_key_rotation_is_visible_to_every_org(
    client: httpx.AsyncClient, ops: Operators, runtime: Runtime
) -> None:
    now = datetime.now(UTC)
    new_key = generate_signing_key(runtime.secret, now)
    runtime.signing_keys.rotate(new_key, now + ROTATION_OVERLAP, "cli:ops", now=now)
    (latest, *_) = await trail(client, ops.auditor)
    assert (latest["action"], latest["actor"], latest["org_id"]) == (
        "signing_key.rotated",
        "cli:ops",
        None,
    )


async def test_the_platform_admin_sees_every_orgs_trail(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    response = await client.get("/console/v1/audit", params={"limit": 500}, headers=ADMIN)
    orgs = {event["org_id"] for event in response.json()["events"]}
    assert ops.tenant.org_id in orgs


async def test_audit_pages_follow_the_cursor(client: httpx.AsyncClient, ops: Operators) -> None:
    everything = await trail(client, ops.auditor)
    first = (await client.get("/operator/audit", params={"limit": 2}, headers=ops.auditor)).json()
    rest = (
        await client.get(
            "/operator/audit",
            params={"limit": 500, "cursor": first["next_cursor"]},
            headers=ops.auditor,
        )
    ).json()
    assert first["events"] + rest["events"] == everything


@pytest.mark.parametrize(
    "statement",
    [update(audit_events).values(actor="someone-else"), delete(audit_events)],
    ids=["update", "delete"],
)
async def test_the_database_refuses_to_change_the_trail(
    ops: Operators, runtime: Runtime, statement: object
) -> None:
    with pytest.raises(DBAPIError), runtime.engine.begin() as conn:
        conn.execute(statement)  # type: ignore[call-overload]
