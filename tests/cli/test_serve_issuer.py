"""``execauth serve --port N`` with no EXECAUTH_ISSUER: receipts name where it listens."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.serving import clean_env, free_port, provision_org, running_service

pytestmark = pytest.mark.e2e

ADMIN_TOKEN = "service_admin_" + secrets.token_urlsafe(32)
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir: Path = tmp_path_factory.mktemp("serve")
    env = clean_env(
        EXECAUTH_DATABASE_URL=f"sqlite:///{workdir / 'execauth.db'}",
        EXECAUTH_ADMIN_TOKEN=ADMIN_TOKEN,
    )
    with running_service(env, workdir, free_port()) as served:
        yield served


def test_receipts_name_the_port_the_service_listens_on(url: str) -> None:
    _, _, secret = provision_org(url, ADMIN_TOKEN)
    receipt = httpx.post(
        url + "/v1/execute", json=PERMIT, headers={"Authorization": f"Bearer {secret}"}
    ).json()
    assert receipt["issuer"] == url


def test_the_key_list_names_the_port_the_service_listens_on(url: str) -> None:
    assert httpx.get(url + "/.well-known/service-keys.json").json()["issuer"] == url
