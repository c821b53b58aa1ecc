"""Console pages over HTTP: timeline, execution, replay, keys, policies, usage, audit."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.conftest import sequence
from tests.web.conftest import Console, csrf_of, secret_of, sign_in

pytestmark = pytest.mark.anyio
PERMIT: dict[str, object] = {
    "surface": "deploy.production",
    "actor": "release-bot",
    "context": {"branch": "main"},
}
DENY: dict[str, object] = {
    "surface": "deploy.production",
    "actor": "release-bot",
    "context": {"branch": "dev"},
}
NEW_VERSION = """
surfaces:
  - match: deploy.production
    rules:
      - id: nobody
        deny: "true"
"""


async def execute(console: Console, body: dict[str, object]) -> dict[str, object]:
    response = await console.client.post("/v1/execute", json=body, headers=console.ops.tenant.auth)
    assert response.status_code == 200, response.text
    receipt: dict[str, object] = response.json()
    return receipt


async def test_the_timeline_lists_executions_newest_first_with_counts(console: Console) -> None:
    first = await execute(console, PERMIT)
    second = await execute(console, DENY)
    page = (await console.client.get("/console/executions")).text
    assert page.index(str(second["execution_id"])) < page.index(str(first["execution_id"]))
    counts = re.findall(r'<span class="n">(\d+)</span> (PERMIT|DENY|SILENCE)', page)
    assert dict((d, n) for n, d in counts) == {"PERMIT": "1", "DENY": "1", "SILENCE": "0"}


async def test_the_timeline_filters_by_decision_and_drops_blank_fields(console: Console) -> None:
    permit = await execute(console, PERMIT)
    deny = await execute(console, DENY)
    blank = await console.client.get("/console/executions?surface=&decision=DENY&actor=")
    assert blank.status_code == 303
    assert blank.headers["location"] == "/console/executions?decision=DENY"
    page = (await console.client.get("/console/executions?decision=DENY")).text
    assert str(deny["execution_id"]) in page
    assert str(permit["execution_id"]) not in page
    live = await console.client.get("/console/timeline?decision=PERMIT")
    assert str(permit["execution_id"]) in live.text
    assert "<html" not in live.text


async def test_a_bad_filter_is_a_400_page(console: Console) -> None:
    response = await console.client.get("/console/executions?decision=MAYBE")
    assert response.status_code == 400
    assert "decision must be one of" in response.text


async def test_an_execution_shows_verification_proof_status_and_replays(
    console: Console,
) -> None:
    receipt = await execute(console, PERMIT)
    path = f"/console/executions/{receipt['execution_id']}"
    page = (await console.client.get(path)).text
    assert "authentic" in page
    assert "main-only" in page
    assert "pending" in page
    sequence(console.client)
    page = (await console.client.get(path)).text
    assert "sequenced</span> at index 0" in page
    replayed = await console.client.post(path + "/replay", data={"csrf_token": csrf_of(page)})
    assert replayed.status_code == 303
    page = (await console.client.get(replayed.headers["location"])).text
    assert "matches the recorded decision" in page
    lineage = (await console.client.get(
        f"/operator/executions/{receipt['execution_id']}", headers=console.ops.admin
    )).json()["lineage"]  # fmt: skip
    assert [e["kind"] for e in lineage] == ["replay"]


async def test_another_orgs_execution_is_not_found(console: Console) -> None:
    response = await console.client.get(
        "/console/executions/service_exec_01ARZ3NDEKTSV4RRFFQ69G5FAV"
    )
    assert response.status_code == 404


async def test_an_admin_issues_a_key_whose_secret_is_shown_once(console: Console) -> None:
    issued = await console.post("/console/keys", {"name": "deployer", "role": "execute"})
    assert issued.status_code == 200
    secret = re.search(r'value="(service_live_[A-Za-z0-9]+)"', issued.text)
    assert secret
    assert "shown <strong>once</strong>" in issued.text
    assert issued.headers["cache-control"] == "no-store"
    listing = await console.client.get("/console/keys")
    assert "deployer" in listing.text
    assert secret.group(1) not in listing.text
    works = await console.client.post(
        "/v1/execute", json=PERMIT, headers={"Authorization": f"Bearer {secret.group(1)}"}
    )
    assert works.status_code == 200


async def test_an_admin_rotates_and_revokes_a_key(console: Console) -> None:
    key_id = console.ops.tenant.key_id
    rotated = await console.post(f"/console/keys/{key_id}/rotate", {"grace_seconds": "0"})
    assert rotated.status_code == 200
    assert "service_live_" in rotated.text
    revoked = await console.post(f"/console/keys/{key_id}/revoke", {"confirm": "revoke"})
    assert revoked.status_code == 303
    old = await console.client.post("/v1/execute", json=PERMIT, headers=console.ops.tenant.auth)
    assert old.status_code == 401
    assert "revoked" in (await console.client.get("/console/keys")).text


async def test_an_invalid_key_request_is_shown_on_the_form(console: Console) -> None:
    response = await console.post("/console/keys", {"name": "x", "role": "superuser"})
    assert response.status_code == 400
    assert "role must be one of" in response.text


async def test_an_auditor_reads_but_cannot_change(
    client: httpx.AsyncClient, console: Console
) -> None:
    client.cookies.clear()
    await sign_in(client, secret_of(console.ops.auditor))
    keys = await client.get("/console/keys")
    assert keys.status_code == 200
    assert "Issue a key" not in keys.text
    assert "Revoke" not in keys.text
    token = csrf_of(keys.text)  # the sign-out form's token
    issue = await client.post("/console/keys", data={"csrf_token": token, "name": "x"})
    assert issue.status_code == 403
    preview = await client.post(
        "/console/policies/preview",
        data={"csrf_token": token, "policy_id": "deploys", "source": NEW_VERSION},
    )
    assert preview.status_code == 403
    assert "Draft a new version" not in (await client.get("/console/policies")).text


async def test_the_execute_keys_secret_never_appears_on_any_page(console: Console) -> None:
    receipt = await execute(console, PERMIT)
    secret = console.ops.tenant.api_key
    paths = [
        "/console/executions",
        f"/console/executions/{receipt['execution_id']}",
        "/console/timeline",
        "/console/keys",
        "/console/policies",
        "/console/policies/deploys",
        "/console/usage",
        "/console/audit",
        "/verify",
    ]
    for path in paths:
        page = await console.client.get(path)
        assert page.status_code == 200, path
        assert secret not in page.text, path
        assert secret[len("service_live_") :] not in page.text, path


async def test_policy_preview_shows_impact_then_publishes(console: Console) -> None:
    await execute(console, PERMIT)
    preview = await console.post(
        "/console/policies/preview", {"policy_id": "deploys", "source": NEW_VERSION}
    )
    assert preview.status_code == 200, preview.text
    assert "<strong>1</strong> would change" in preview.text
    previewed = re.search(r'name="previewed" value="([0-9a-f]+)"', preview.text)
    assert previewed
    tampered = await console.post(
        "/console/policies/publish",
        {"policy_id": "deploys", "source": NEW_VERSION + "#", "previewed": previewed.group(1)},
    )
    assert tampered.status_code == 400
    published = await console.post(
        "/console/policies/publish",
        {"policy_id": "deploys", "source": NEW_VERSION, "previewed": previewed.group(1)},
    )
    assert published.status_code == 303
    assert published.headers["location"] == "/console/policies/deploys?published=2"
    diff = await console.client.get("/console/policies/deploys/diff?from=1&to=2")
    assert diff.status_code == 200
    assert '<span class="add">+      - id: nobody</span>' in diff.text
    assert '<span class="del">-      - id: main-only</span>' in diff.text


async def test_an_invalid_draft_is_refused_with_its_reason(console: Console) -> None:
    response = await console.post(
        "/console/policies/preview", {"policy_id": "deploys", "source": "surfaces: [{match: 1"}
    )
    assert response.status_code == 400
    assert 'class="notice error"' in response.text


async def test_usage_is_drawn_against_the_quota(console: Console) -> None:
    await execute(console, PERMIT)
    await execute(console, DENY)
    page = await console.client.get("/console/usage")
    assert page.status_code == 200
    assert page.text.count("<svg") == 3
    assert "2 / 1000" in page.text
    assert 'class="bar permit"' in page.text
    assert 'class="bar deny"' in page.text


async def test_the_audit_trail_is_paged(console: Console) -> None:
    for n in range(3):
        await console.post("/console/keys", {"name": f"k{n}", "role": "execute"})
    page = await console.client.get("/console/audit?limit=2")
    assert page.status_code == 200
    assert page.text.count("api_key.issued") == 2
    older = re.search(r'href="(/console/audit\?cursor=[^"]+)"', page.text)
    assert older
    assert (await console.client.get(older.group(1).replace("&amp;", "&"))).status_code == 200


async def test_revoking_asks_for_confirmation_on_a_page_of_its_own(console: Console) -> None:
    key_id = console.ops.tenant.key_id
    listing = (await console.client.get("/console/keys")).text
    assert f'href="/console/keys/{key_id}/revoke"' in listing
    confirm = await console.client.get(f"/console/keys/{key_id}/revoke")
    assert confirm.status_code == 200
    assert "cannot be undone" in confirm.text
    assert 'name="confirm" value="revoke"' in confirm.text


async def test_a_revoke_without_confirmation_is_refused_and_the_key_works(
    console: Console,
) -> None:
    key_id = console.ops.tenant.key_id
    refused = await console.post(f"/console/keys/{key_id}/revoke", {})
    assert refused.status_code == 400
    assert "confirmation" in refused.text
    works = await console.client.post("/v1/execute", json=PERMIT, headers=console.ops.tenant.auth)
    assert works.status_code == 200


async def test_a_confirmed_revoke_ends_with_a_success_notice(console: Console) -> None:
    key_id = console.ops.tenant.key_id
    revoked = await console.post(f"/console/keys/{key_id}/revoke", {"confirm": "revoke"})
    assert revoked.status_code == 303
    page = (await console.client.get(revoked.headers["location"])).text
    notice = re.search(r'<p class="notice ok" role="status" id="revoked-notice">(.*?)</p>', page)
    assert notice
    assert key_id in notice.group(1)
    assert "is revoked" in notice.group(1)


async def test_a_revoked_notice_is_not_shown_for_a_key_that_is_not_revoked(
    console: Console,
) -> None:
    page = (await console.client.get(f"/console/keys?revoked={console.ops.tenant.key_id}")).text
    assert "revoked-notice" not in page


async def test_rotating_is_a_page_with_the_grace_to_choose(console: Console) -> None:
    key_id = console.ops.tenant.key_id
    page = await console.client.get(f"/console/keys/{key_id}/rotate")
    assert page.status_code == 200
    assert 'name="grace_seconds"' in page.text
    assert f'action="/console/keys/{key_id}/rotate"' in page.text


async def test_an_auditor_gets_no_revoke_page(client: httpx.AsyncClient, console: Console) -> None:
    client.cookies.clear()
    await sign_in(client, secret_of(console.ops.auditor))
    page = await client.get(f"/console/keys/{console.ops.tenant.key_id}/revoke")
    assert page.status_code == 403


async def test_the_revoke_page_of_another_orgs_key_is_not_found(console: Console) -> None:
    page = await console.client.get("/console/keys/key_01m8416t7tgdrh74w30h1wmevn/revoke")
    assert page.status_code == 404


async def test_the_timeline_draws_decisions_over_time_by_decision_and_surface(
    console: Console,
) -> None:
    await execute(console, PERMIT)
    await execute(console, DENY)
    page = (await console.client.get("/console/executions")).text
    charts = re.findall(r'<figure class="chart series".*?</figure>', page, re.S)
    assert len(charts) == 2
    by_decision, by_surface = charts
    assert "Executes by decision" in by_decision
    assert 'class="bar permit"><title>PERMIT: 1</title>' in by_decision
    assert 'class="bar deny"><title>DENY: 1</title>' in by_decision
    assert "Executes by surface" in by_surface
    assert 'class="bar s0"><title>deploy.production: 2</title>' in by_surface
    assert by_decision.count('<g class="column">') == 24


async def test_the_timeline_draws_fourteen_days_by_day(console: Console) -> None:
    page = await console.client.get("/console/executions?window=14d")
    assert page.status_code == 200
    chart = re.search(r'<figure class="chart series".*?</figure>', page.text, re.S)
    assert chart
    assert chart.group(0).count('<g class="column">') == 14


async def test_an_unknown_timeline_window_is_a_400_page(console: Console) -> None:
    page = await console.client.get("/console/executions?window=1y")
    assert page.status_code == 400
    assert "window must be one of" in page.text


async def test_the_audit_trail_shows_details_as_labelled_values_not_json(
    console: Console,
) -> None:
    await console.post("/console/keys", {"name": "deployer", "role": "execute"})
    page = (await console.client.get("/console/audit")).text
    assert "<dt>role</dt><dd>execute</dd>" in page
    assert "<dt>name</dt><dd>deployer</dd>" in page
    assert "&#34;" not in page  # no JSON quoting left in the table
    assert 'class="details"' not in page


def why_section(page: str) -> str:
    section = re.search(r'<section id="why".*?</section>', page, re.S)
    assert section, "the execution page has no Why section"
    return section.group(0)


async def test_an_execution_page_shows_each_rule_and_its_conditions_value(
    console: Console,
) -> None:
    receipt = await execute(console, DENY)
    why = why_section(
        (await console.client.get(f"/console/executions/{receipt['execution_id']}")).text
    )
    assert "Why DENY" in why
    main_only = re.search(r'<tr data-rule="main-only".*?</tr>', why, re.S)
    wrong_branch = re.search(r'<tr data-rule="wrong-branch" class="decisive">.*?</tr>', why, re.S)
    assert main_only
    assert wrong_branch
    assert "context.branch == &#34;main&#34;" in main_only.group(0)
    assert ">false<" in main_only.group(0)
    assert ">true<" in wrong_branch.group(0)


async def test_an_execution_page_shows_the_block_chosen_and_the_required_context(
    console: Console,
) -> None:
    receipt = await execute(console, PERMIT)
    why = why_section(
        (await console.client.get(f"/console/executions/{receipt['execution_id']}")).text
    )
    chosen = re.search(r'<tr class="chosen">.*?</tr>', why, re.S)
    assert chosen
    assert "deploy.production" in chosen.group(0)
    assert "exact match" in chosen.group(0)
    assert '<code>context.branch</code> <span class="badge permit">present</span>' in why


async def test_a_silence_page_says_which_required_context_was_missing(console: Console) -> None:
    body: dict[str, object] = {"surface": "deploy.production", "actor": "release-bot"}
    receipt = await execute(console, body)
    why = why_section(
        (await console.client.get(f"/console/executions/{receipt['execution_id']}")).text
    )
    assert "Why SILENCE" in why
    assert '<code>context.branch</code> <span class="badge deny">missing</span>' in why


@pytest.mark.parametrize("grace", ["²", "9" * 30, "-1", "2592001"])
async def test_a_grace_the_parameter_parser_refuses_is_a_400_page(
    console: Console, grace: str
) -> None:
    key_id = console.ops.tenant.key_id
    response = await console.post(f"/console/keys/{key_id}/rotate", {"grace_seconds": grace})
    assert response.status_code == 400
    assert "grace_seconds must be an integer" in response.text


@pytest.mark.parametrize("version", ["²", "99999999999999999999", "0"])
async def test_a_policy_version_out_of_range_is_a_400_page(console: Console, version: str) -> None:
    response = await console.client.get(f"/console/policies/deploys?version={version}")
    assert response.status_code == 400
    assert "version must be an integer" in response.text


async def test_an_expiry_at_the_edge_of_the_calendar_is_a_400_on_the_form(
    console: Console,
) -> None:
    response = await console.post(
        "/console/keys",
        {"name": "edge", "role": "execute", "expires_at": "9999-12-31T23:59:59-01:00"},
    )
    assert response.status_code == 400
    assert "expires at" in response.text
