"""The approvals inbox in a real browser (Debian's Chromium via Playwright) against a real
``execauth serve``: an admin signs in, opens the inbox, approves, and follows the link to
the PERMIT the approval issued.

Skips with a visible reason when /usr/bin/chromium is missing (``make pytest`` installs
it). Screenshots go to ``$EXECAUTH_SCREENSHOT_DIR`` when set, else to a temporary directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.approvals.conftest import ESCALATE_POLICY
from tests.serving import served_org

pytestmark = pytest.mark.e2e
CHROMIUM = Path("/usr/bin/chromium")
REQUEST: dict[str, Any] = {
    "surface": "deploy.production",
    "actor": "release-bot",
    "context": {"env": "prod"},
}

if not CHROMIUM.exists():
    pytest.skip(
        "browser tests need Debian's chromium at /usr/bin/chromium (make pytest installs it)",
        allow_module_level=True,
    )
sync_api = pytest.importorskip("playwright.sync_api")


@dataclass
class Site:
    url: str
    execute_key: str
    admin_key: str

    def escalate(self, **context: str) -> dict[str, Any]:
        response = httpx.post(
            self.url + "/v1/execute",
            json={**REQUEST, "context": {**REQUEST["context"], **context}},
            headers={"Authorization": f"Bearer {self.execute_key}"},
        )
        assert response.status_code == 200, response.text
        receipt: dict[str, Any] = response.json()
        assert receipt["decision"] == "ESCALATE", receipt
        return receipt


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    policy = ESCALATE_POLICY.replace("QUORUM", "1")
    workdir = tmp_path_factory.mktemp("approvals-web")
    with served_org(workdir, policy, admin_key_name="alice") as served:
        yield Site(served.url, served.execute_key, served.admin_key)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
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


def sign_in(page: Any, site: Site) -> None:
    page.goto(site.url + "/console/")
    page.get_by_label("API key").fill(site.admin_key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/executions")


def test_approve_from_the_inbox_and_open_the_linked_permit(
    page: Any, site: Site, shots: Path
) -> None:
    receipt = site.escalate(ticket="CHG-4711")
    sign_in(page, site)
    page.get_by_role("navigation", name="Console").get_by_role("link", name="Approvals").click()
    page.wait_for_url("**/console/approvals")
    card = page.locator(f'section[data-approval-id="{receipt["approval_id"]}"]')
    assert "CHG-4711" in card.inner_text()
    assert "needs-approval" in card.inner_text()
    card.get_by_label("Reason (required to reject)").fill("CHG-4711 reviewed")
    page.screenshot(path=str(shots / "approvals.png"), full_page=True)
    card.get_by_role("button", name="Approve").click()
    page.wait_for_url(f"**/console/approvals/{receipt['approval_id']}?voted=approve")
    assert "issued a PERMIT" in page.get_by_role("status").inner_text()
    page.screenshot(path=str(shots / "approval-approved.png"), full_page=True)
    page.locator(".approval-outcome").get_by_role("link").click()
    page.wait_for_url("**/console/executions/service_exec_*")
    assert "PERMIT" in page.locator(".facts .badge").first.inner_text()
    assert "authentic" in page.locator("#verification").inner_text()
    assert receipt["approval_id"] in page.locator("#receipt-json").inner_text()


def test_a_refused_vote_is_a_message_on_the_page(page: Any, site: Site) -> None:
    receipt = site.escalate()
    sign_in(page, site)
    page.goto(site.url + "/console/approvals")
    card = page.locator(f'section[data-approval-id="{receipt["approval_id"]}"]')
    card.get_by_label("Voting for (person, optional)").fill("release-bot")
    card.get_by_role("button", name="Approve").click()
    alert = page.get_by_role("alert")
    alert.wait_for()
    assert "requested the execution and cannot approve it" in alert.inner_text()
    assert page.locator(".approval-state").inner_text().startswith("pending")
