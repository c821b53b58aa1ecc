"""The README's walkthrough holds for a newcomer, run against a real ``execauth serve``.

Commands and bodies are taken from README.md as written where they matter: the
organization made without a plan, the request for a surface no policy governs, and the
``sed`` line that makes the tampered receipt the walkthrough then verifies.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from execauth.cli import app
from tests.cli.conftest import RunningService

pytestmark = pytest.mark.e2e

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def readme_body(surface: str) -> dict[str, object]:
    """The JSON of the README's first ``-d '…'`` naming ``surface``."""
    for body in re.findall(r"-d '(\{.*?\})'", README):
        document: dict[str, object] = json.loads(body)
        if document.get("surface") == surface:
            return document
    raise AssertionError(f"README sends no request for {surface}")


def readme_policy() -> str:
    return README.split("cat > deploys.yaml <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0] + "\n"


@pytest.fixture(scope="module")
def walkthrough(service: RunningService, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Steps 1–5 up to the receipts and the saved key list, in a directory of their own."""
    workdir = tmp_path_factory.mktemp("walkthrough")
    admin = {"Authorization": f"Bearer {service.admin_token}"}
    org = httpx.post(service.url + "/console/v1/orgs", json={"name": "Acme"}, headers=admin)
    org_id = org.json()["org_id"]
    (workdir / "org.json").write_text(org.text)
    key = httpx.post(
        f"{service.url}/console/v1/orgs/{org_id}/keys",
        json={"name": "ci", "role": "execute", "surfaces": ["deploy.**"]},
        headers=admin,
    ).json()["api_key"]
    (workdir / "key").write_text(key)
    published = httpx.put(
        f"{service.url}/console/v1/orgs/{org_id}/policies/deploys",
        content=readme_policy(),
        headers={**admin, "content-type": "application/yaml"},
    )
    assert published.status_code == 201, published.text
    permit = httpx.post(
        service.url + "/v1/execute",
        json=readme_body("deploy.production"),
        headers={"Authorization": f"Bearer {key}"},
    )
    (workdir / "permit.json").write_bytes(permit.content)
    keys = httpx.get(service.url + "/.well-known/service-keys.json")
    (workdir / "keys.json").write_bytes(keys.content)
    return workdir


def test_the_readme_org_without_a_plan_is_unmetered(walkthrough: Path) -> None:
    assert json.loads((walkthrough / "org.json").read_text())["plan"] == "unmetered"
    assert '"plan":"unmetered"' in README


def test_a_surface_no_policy_governs_is_404_without_a_receipt_as_the_readme_says(
    service: RunningService, walkthrough: Path
) -> None:
    key = (walkthrough / "key").read_text()
    response = httpx.post(
        service.url + "/v1/execute",
        json=readme_body("deploy.staging"),
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 404
    assert response.json()["error"] == "surface_not_found"
    assert "signature" not in response.json()
    assert f'"message":"{response.json()["message"]}"' in README


def test_the_readme_makes_the_tampered_receipt_it_verifies(walkthrough: Path) -> None:
    (sed_line,) = re.findall(r"^\$ (sed .*> tampered\.json)$", README, re.MULTILINE)
    subprocess.run(["bash", "-c", sed_line], cwd=walkthrough, check=True)
    tampered = json.loads((walkthrough / "tampered.json").read_text())
    assert tampered["surface"] == "deploy.staging"
    result = CliRunner().invoke(
        app,
        ["verify", str(walkthrough / "tampered.json"), "--keys", str(walkthrough / "keys.json")],
    )
    assert result.exit_code == 1
    assert result.stdout.startswith("INVALID: PERMIT receipt")
    assert "bad_signature" in result.stdout
