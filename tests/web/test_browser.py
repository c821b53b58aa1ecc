"""The console and /verify in a real browser (Debian's Chromium via Playwright) against
a real ``execauth serve``.

Skips with a visible reason when /usr/bin/chromium is missing (``make pytest``
installs it). Screenshots at 1280 px go to ``$EXECAUTH_SCREENSHOT_DIR`` when set
(``docs/screenshots`` holds the committed ones), else to a temporary directory.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import DEPLOY_POLICY
from tests.serving import served_org

pytestmark = pytest.mark.e2e
CHROMIUM = Path("/usr/bin/chromium")
VECTORS = Path(__file__).resolve().parents[2] / "testdata" / "vectors"
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
WIDE = {"width": 1280, "height": 900}

if not CHROMIUM.exists():
    pytest.skip(
        "browser tests need Debian's chromium at /usr/bin/chromium (make pytest installs it)",
        allow_module_level=True,
    )
sync_api = pytest.importorskip("playwright.sync_api")


@dataclass
class Site:
    url: str
    org_id: str
    execute_key: str
    admin_key: str
    admin_token: str

    def execute(self, body: dict[str, Any]) -> dict[str, Any]:
        response = httpx.post(
            self.url + "/v1/execute",
            json=body,
            headers={"Authorization": f"Bearer {self.execute_key}"},
        )
        assert response.status_code == 200, response.text
        receipt: dict[str, Any] = response.json()
        return receipt


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with served_org(tmp_path_factory.mktemp("web"), DEPLOY_POLICY) as served:
        yield Site(
            served.url, served.org_id, served.execute_key, served.admin_key, served.admin_token
        )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport=WIDE)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield page
    context.close()
    csp = [e for e in errors if "Content Security Policy" in e]
    assert not csp, csp


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = os.environ.get("EXECAUTH_SCREENSHOT_DIR")
    path = Path(target) if target else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def sign_in(page: Any, site: Site, api_key: str) -> None:
    page.goto(site.url + "/console/")
    page.get_by_label("API key").fill(api_key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/executions")


def test_sign_in_watch_an_execution_arrive_open_and_replay_it(
    page: Any, site: Site, shots: Path
) -> None:
    page.goto(site.url + "/console/login")
    page.screenshot(path=str(shots / "login.png"), full_page=True)
    sign_in(page, site, site.admin_key)
    receipt = site.execute(PERMIT)
    site.execute({**PERMIT, "context": {"branch": "feature"}})
    row = page.locator(f'tr[data-execution-id="{receipt["execution_id"]}"]')
    row.wait_for(timeout=10_000)  # arrives by the live poll, without a reload
    page.reload()  # the charts over time are drawn when the page loads
    page.screenshot(path=str(shots / "timeline.png"), full_page=True)
    row.get_by_role("link").click()
    page.wait_for_url(f"**/console/executions/{receipt['execution_id']}")
    assert "authentic" in page.locator("#verification").inner_text()
    page.get_by_role("button", name="Replay").click()
    page.locator("#replay-result").wait_for()
    assert "matches the recorded decision" in page.locator("#replay-result").inner_text()
    page.reload()  # by now the sequencer has placed it in the log
    page.screenshot(path=str(shots / "execution.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(site.url + "/console/executions")
    page.screenshot(path=str(shots / "timeline-phone.png"), full_page=True)


def test_issue_and_revoke_a_key(page: Any, site: Site, shots: Path) -> None:
    sign_in(page, site, site.admin_key)
    page.get_by_role("link", name="Keys").click()
    page.get_by_label("Name").fill("deploy-bot")
    page.get_by_label("Role").select_option("execute")
    page.get_by_label("Allowed surfaces (optional)").fill("deploy.*")
    page.get_by_role("button", name="Issue key").click()
    secret = page.locator("#secret").input_value()
    assert secret.startswith("service_live_")
    assert page.get_by_role("button", name="Copy").is_visible()
    page.screenshot(path=str(shots / "key-issued.png"), full_page=True)
    works = httpx.post(
        site.url + "/v1/execute", json=PERMIT, headers={"Authorization": f"Bearer {secret}"}
    )
    assert works.status_code == 200
    page.get_by_role("link", name="Done: back to keys").click()
    assert secret not in page.content()
    page.screenshot(path=str(shots / "keys.png"), full_page=True)
    page.get_by_role("link", name="Revoke deploy-bot…").click()
    page.get_by_role("heading", name="Revoke key deploy-bot?").wait_for()
    page.screenshot(path=str(shots / "key-revoke-confirm.png"), full_page=True)
    page.get_by_role("button", name="Revoke deploy-bot").click()
    page.wait_for_url("**/console/keys?revoked=*")
    assert "deploy-bot" in page.get_by_role("status").inner_text()
    row = page.locator("tr", has_text="deploy-bot")
    assert "revoked" in row.inner_text()
    page.screenshot(path=str(shots / "key-revoked.png"), full_page=True)
    refused = httpx.post(
        site.url + "/v1/execute", json=PERMIT, headers={"Authorization": f"Bearer {secret}"}
    )
    assert refused.status_code == 401


def test_policies_usage_and_audit_pages(page: Any, site: Site, shots: Path) -> None:
    sign_in(page, site, site.admin_key)
    page.get_by_role("link", name="Policies").click()
    source = page.get_by_label("Draft", exact=True)
    source.fill(DEPLOY_POLICY.replace('branch == "main"', 'branch in ["main", "release"]'))
    page.get_by_role("button", name="Preview impact").click()
    page.get_by_role("heading", name="Impact preview: deploys").wait_for()
    assert "would change" in page.content()
    page.screenshot(path=str(shots / "policy-impact.png"), full_page=True)
    page.get_by_role("button", name=re.compile("Publish as the next version")).click()
    page.get_by_role("heading", name="Policy deploys").wait_for()
    assert "Published version 2." in page.locator("main").inner_text(), page.content()
    page.screenshot(path=str(shots / "policy.png"), full_page=True)
    page.get_by_role("button", name="Show diff").click()
    assert page.locator("pre.diff .add").count() >= 1
    page.screenshot(path=str(shots / "policy-diff.png"), full_page=True)
    page.get_by_role("link", name="Usage").click()
    page.wait_for_url("**/console/usage")
    assert page.locator("figure.chart svg").count() == 3
    page.screenshot(path=str(shots / "usage.png"), full_page=True)
    page.get_by_role("link", name="Audit trail").click()
    page.wait_for_url("**/console/audit")
    assert "policy.published" in page.content()


@pytest.mark.parametrize("width", [1280, 1600])
def test_the_key_actions_are_inside_the_window(page: Any, site: Site, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, site, site.admin_key)
    page.goto(site.url + "/console/keys")
    for name in ("Rotate ci…", "Revoke ci…"):
        action = page.get_by_role("link", name=name)
        box = action.bounding_box()
        assert box is not None, name
        assert box["x"] >= 0, name
        assert box["x"] + box["width"] <= width, f"{name} is clipped at {width} px: {box}"
        wrap = page.locator(".table-wrap").first.bounding_box()
        assert box["x"] + box["width"] <= wrap["x"] + wrap["width"], f"{name} scrolled out"


def test_the_execution_page_shows_why_and_the_timeline_draws_over_time(
    page: Any, site: Site, shots: Path
) -> None:
    sign_in(page, site, site.admin_key)
    denied = site.execute({**PERMIT, "context": {"branch": "feature"}})
    page.goto(site.url + "/console/executions")
    assert page.locator("figure.chart.series svg").count() == 2
    assert page.locator("figure.chart.series rect.bar.deny").count() >= 1
    page.goto(site.url + f"/console/executions/{denied['execution_id']}")
    why = page.locator("#why")
    assert "Why DENY" in why.inner_text()
    decisive = why.locator('tr[data-rule="wrong-branch"]')
    assert "true" in decisive.inner_text()
    assert "not-main" not in why.inner_text()
    why.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "execution-why.png"), full_page=True)


def test_the_audit_trail_wraps_between_words(page: Any, site: Site, shots: Path) -> None:
    sign_in(page, site, site.admin_key)
    page.goto(site.url + "/console/audit")
    values = page.locator(".kv dd")
    assert values.count() >= 1
    style = values.first.evaluate(
        "e => { const s = getComputedStyle(e); return [s.wordBreak, s.overflowWrap]; }"
    )
    assert style[0] != "break-all", style
    assert style[1] != "anywhere", style
    table, wrap = page.locator("table.audit"), page.locator(".table-wrap").first
    fits = "e => e.scrollWidth <= e.clientWidth"
    assert wrap.evaluate(fits), "the audit table is wider than its frame"
    assert table.bounding_box()["width"] <= 1280
    page.screenshot(path=str(shots / "audit.png"), full_page=True)


def verify_text(page: Any, text: str, now: str = "") -> dict[str, str]:
    """Paste ``text`` into /verify, press Verify, and read the verdict the page shows."""
    before = int(page.evaluate("document.body.dataset.verdicts || '0'"))
    page.locator("#receipt").fill(text)
    page.evaluate("(v) => { document.getElementById('as-of').value = v; }", now)
    page.get_by_role("button", name="Verify").click()
    page.locator(f'body[data-verdicts="{before + 1}"]').wait_for(state="attached")
    verdict: dict[str, str] = page.evaluate(
        "() => ({...document.getElementById('verdict').dataset})"
    )
    return verdict


def test_verify_a_pasted_receipt_and_a_tampered_one(page: Any, site: Site, shots: Path) -> None:
    receipt = site.execute(PERMIT)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.method + " " + r.url))
    page.goto(site.url + "/verify")
    page.locator('body[data-verify-ready="true"]').wait_for(state="attached")
    good = verify_text(page, json.dumps(receipt, indent=2))
    assert good["category"] == "authentic", good
    assert good["reason"] == "valid"
    assert page.locator("#payload-digest").text_content() == receipt["receiptHash"]
    page.locator("#payload-details summary").click()
    page.screenshot(path=str(shots / "verify-authentic.png"), full_page=True)
    tampered = verify_text(page, json.dumps({**receipt, "surface": "deploy.staging"}, indent=2))
    assert tampered["category"] == "tampered", tampered
    assert tampered["reason"] == "bad_signature"
    page.screenshot(path=str(shots / "verify-tampered.png"), full_page=True)
    assert page.locator("#decision").get_attribute("data-kind") == "unverified"
    assert page.locator("#decision").inner_text() == "Unverified PERMIT"
    sent = [r for r in requests if not r.startswith("GET ")]
    assert not sent, f"the page must not send anything: {sent}"
    fetched = {r.split(" ", 1)[1].split("?")[0].removeprefix(site.url) for r in requests}
    assert fetched <= {"/verify", "/.well-known/service-keys.json"} | {
        f"/static/{n}" for n in ("console.css", "verify.js", "receipt-verify.js")
    }, fetched


def test_the_verify_page_agrees_with_every_vector(page: Any, site: Site) -> None:
    index_path = VECTORS / "index.json"
    if not index_path.exists():
        pytest.skip("testdata/vectors/index.json is not there yet")
    index = json.loads(index_path.read_text(encoding="utf-8"))
    key_list = {"body": ""}
    page.route(
        "**/.well-known/service-keys.json",
        lambda route: route.fulfill(
            status=200, content_type="application/json", body=key_list["body"]
        ),
    )
    page.goto(site.url + "/verify")
    page.locator('body[data-verify-ready="true"]').wait_for(state="attached")
    disagreements = []
    for vector in index["vectors"]:
        case = json.loads((VECTORS / vector["file"]).read_text(encoding="utf-8"))
        key_list["body"] = (VECTORS / vector["keys"]).read_text(encoding="utf-8")
        raw = (VECTORS / vector["file"]).read_text(encoding="utf-8")
        ascii_only = "ascii-escaped" in vector["name"]
        text = json.dumps(case["receipt"], ensure_ascii=ascii_only) if "receipt" in case else raw
        shown = verify_text(page, text, case.get("now", index["now"]))
        expected = vector["expected"]
        got = (shown["reason"], shown["authentic"] == "true", shown["expired"] == "true")
        want = (expected["reason"], expected["authentic"], expected["expired"])
        if got != want:
            disagreements.append(f"{vector['name']}: page says {got}, vector says {want}")
    assert not disagreements, "\n".join(disagreements)
    assert len(index["vectors"]) > 10


def test_an_authentic_deny_on_verify_reads_as_a_refusal_as_large_as_its_verdict(
    page: Any, site: Site, shots: Path
) -> None:
    receipt = site.execute({**PERMIT, "context": {"branch": "feature"}})
    page.goto(site.url + "/verify")
    page.locator('body[data-verify-ready="true"]').wait_for(state="attached")
    shown = verify_text(page, json.dumps(receipt, indent=2))
    assert shown["category"] == "authentic", shown
    decision = page.locator("#decision")
    assert decision.get_attribute("data-kind") == "deny"
    assert decision.inner_text() == "DENY: refused"
    size = "e => parseFloat(getComputedStyle(e).fontSize)"
    assert decision.evaluate(size) >= page.locator("#verdict").evaluate(size)
    colours = "e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor]"
    assert decision.evaluate(colours) != page.locator("#verdict").evaluate(colours)
    box, verdict_box = decision.bounding_box(), page.locator("#verdict").bounding_box()
    assert box["y"] == verdict_box["y"]  # side by side, not below it
    page.screenshot(path=str(shots / "verify-deny.png"), full_page=True)


def test_the_public_site_home_trust_and_guides(page: Any, site: Site, shots: Path) -> None:
    page.goto(site.url + "/")
    assert page.get_by_role("heading", name="Quickstart").is_visible()
    assert page.get_by_role("heading", name="Two commands").is_visible()
    page.screenshot(path=str(shots / "site-home.png"), full_page=True)
    page.get_by_role("navigation", name="Site").get_by_role("link", name="Trust").click()
    page.wait_for_url("**/trust")
    published = httpx.get(site.url + "/.well-known/service-keys.json").json()["keys"]
    rows = page.locator("#signing-keys tbody tr[data-key-id]")
    assert rows.count() == len(published)
    assert rows.first.get_attribute("data-key-id") == published[0]["key_id"]
    assert page.get_by_role("heading", name="Verifying without execauth").is_visible()
    page.screenshot(path=str(shots / "site-trust.png"), full_page=True)
    page.get_by_role("navigation", name="Site").get_by_role("link", name="Guides").click()
    page.get_by_role("link", name="Python SDK").click()
    page.wait_for_url("**/guides/python")
    assert page.get_by_role("heading", name="Offline verification").is_visible()
    page.screenshot(path=str(shots / "site-guide-python.png"), full_page=True)
    for path in ("/", "/trust", "/guides/python"):
        text = httpx.get(site.url + path).text
        assert site.org_id not in text, path
        assert site.execute_key not in text, path
        assert site.admin_token not in text, path
