"""The public site: pages rendered from the project's own docs, the live key list, no org data."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import httpx
import pytest

from execauth.errors import NotFound
from execauth.web.site import GUIDES, PACKAGED_DOCS, Part, SiteDocs, sources
from tests.conftest import ADMIN_TOKEN, Tenant, sequence

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
PUBLIC_PAGES = ["/", "/trust", "/guides", *(f"/guides/{g.slug}" for g in GUIDES)]


def doc_of(page: str) -> str:
    """The rendered docs of a page, without the page's own frame."""
    return "\n".join(re.findall(r'<div class="doc[^"]*">(.*?)</div>\n', page, re.S))


async def test_the_home_page_is_html_not_a_json_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")


async def test_the_home_page_quickstart_is_the_readmes(client: httpx.AsyncClient) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_command = re.search(r"## Two commands\n\n```sh\n(make serve[^\n#]*)", readme)
    assert first_command
    page = (await client.get("/")).text
    assert '<h3 id="two-commands">Two commands</h3>' in page
    assert '<h3 id="a-five-minute-walkthrough">A five-minute walkthrough</h3>' in page
    assert first_command.group(1).strip() in page


async def test_the_trust_page_lists_the_live_signing_keys(client: httpx.AsyncClient) -> None:
    published = (await client.get("/.well-known/service-keys.json")).json()["keys"]
    page = (await client.get("/trust")).text
    listed = re.findall(r'<tr data-key-id="([^"]+)">', page)
    assert listed == [k["key_id"] for k in published]
    assert published[0]["public_key"] in page


async def test_the_trust_page_shows_how_to_verify_offline_and_what_is_logged(
    client: httpx.AsyncClient,
) -> None:
    page = (await client.get("/trust")).text
    assert '<h3 id="verifying-without-execauth">' in page
    assert "load_der_public_key" in page
    assert '<h3 id="what-is-logged">What is logged</h3>' in page
    assert 'href="/verify"' in page


@pytest.mark.parametrize("guide", GUIDES, ids=lambda g: g.slug)
async def test_each_guide_renders_its_source(client: httpx.AsyncClient, guide: object) -> None:
    assert guide in GUIDES
    slug = next(g for g in GUIDES if g is guide)
    page = await client.get(f"/guides/{slug.slug}")
    assert page.status_code == 200
    source = (ROOT / slug.parts[0].source).read_text(encoding="utf-8")
    heading = slug.parts[0].sections[0] if slug.parts[0].sections else source.splitlines()[0][2:]
    assert f">{heading}</h" in page.text.replace("<code>", "`").replace("</code>", "`")


async def test_the_guides_page_links_every_guide(client: httpx.AsyncClient) -> None:
    page = (await client.get("/guides")).text
    for guide in GUIDES:
        assert f'href="/guides/{guide.slug}"' in page


async def test_an_unknown_guide_is_a_404_page(client: httpx.AsyncClient) -> None:
    response = await client.get("/guides/cobol")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")


async def test_links_between_docs_lead_to_site_pages(client: httpx.AsyncClient) -> None:
    page = doc_of((await client.get("/")).text)
    assert 'href="/trust' in page  # README → docs/receipts.md and docs/ledger.md
    relative = re.findall(r'href="(?![a-z]+:|/|#)([^"]*)"', page)
    assert not relative, relative


async def test_no_public_page_shows_org_data_or_secrets(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    executed = await client.post(
        "/v1/execute", json={"surface": "deploy.staging"}, headers=tenant.auth
    )
    assert executed.status_code == 200
    sequence(client)
    receipt = executed.json()
    secrets = [tenant.api_key, tenant.api_key.removeprefix("service_live_"), ADMIN_TOKEN]
    org_data = [tenant.org_id, tenant.key_id, receipt["receipt_id"], receipt["execution_id"]]
    for path in PUBLIC_PAGES:
        page = await client.get(path)
        assert page.status_code == 200, path
        for value in secrets + org_data:
            assert value not in page.text, (path, value)


def test_raw_html_in_a_doc_is_shown_as_text(tmp_path: Path) -> None:
    (tmp_path / "guide.md").write_text("# Guide\n\n<script>alert(1)</script>\n", encoding="utf-8")
    html = SiteDocs(tmp_path).html((Part("guide.md"),))
    assert "<script>" not in html
    assert "&lt;script&gt;" in html


def test_a_section_the_doc_no_longer_has_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# x\n\n## Renamed\n\ntext\n", encoding="utf-8")
    with pytest.raises(LookupError, match="Two commands"):
        SiteDocs(tmp_path).html((Part("README.md", ("Two commands",)),))


def test_a_hash_in_a_code_block_does_not_end_a_section(tmp_path: Path) -> None:
    text = "# x\n\n## Run\n\n```sh\n# a comment\nmake serve\n```\n\n## Next\n\nafter\n"
    (tmp_path / "README.md").write_text(text, encoding="utf-8")
    html = SiteDocs(tmp_path).html((Part("README.md", ("Run",)),))
    assert "make serve" in html
    assert "after" not in html


def test_a_doc_that_is_not_installed_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        SiteDocs(tmp_path).html((Part("docs/missing.md"),))


def test_every_rendered_doc_is_packaged_into_the_wheel() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    included = project["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    for source in sorted(sources()):
        assert included.get(source) == f"execauth/web/{PACKAGED_DOCS}/{source}", source
