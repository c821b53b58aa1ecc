"""A service started with no configuration: its issuer follows where it listens, and an
organization created without a plan is on the unmetered plan (docs/decisions.md)."""

from __future__ import annotations

import httpx
import pytest
from pydantic import ValidationError

from execauth.config import PlanSettings, Settings
from tests.conftest import ADMIN, DEPLOY_POLICY, small_plans

ENV = ("EXECAUTH_ISSUER", "EXECAUTH_HOST", "EXECAUTH_PORT", "EXECAUTH_DEFAULT_PLAN")
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


@pytest.fixture
def plans() -> dict[str, PlanSettings]:
    """The default catalog with a free plan of three executes a month."""
    return small_plans(free_executes=3)


@pytest.fixture
def default_plan() -> str | None:
    return "unmetered"


@pytest.fixture
def settings(settings: Settings, default_plan: str | None) -> Settings:
    """The shared test settings, but with this service's default plan (not "free")."""
    return settings.model_copy(update={"default_plan": default_plan})


@pytest.fixture(autouse=True)
def no_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*ENV, "EXECAUTH_CONFIG_FILE", "EXECAUTH_PLANS"):
        monkeypatch.delenv(name, raising=False)


def test_default_issuer_is_the_default_listen_address() -> None:
    assert Settings().issuer == "http://127.0.0.1:8080"


def test_issuer_follows_the_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXECAUTH_PORT", "9000")
    assert Settings().issuer == "http://127.0.0.1:9000"


def test_issuer_follows_the_host_and_port() -> None:
    assert Settings(host="10.0.0.7", port=8443).issuer == "http://10.0.0.7:8443"


def test_issuer_of_an_ipv6_listener_has_brackets() -> None:
    assert Settings(host="::1", port=9000).issuer == "http://[::1]:9000"


def test_a_configured_issuer_wins_over_host_and_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXECAUTH_ISSUER", "https://auth.example.com")
    assert Settings(port=9000).issuer == "https://auth.example.com"


def test_default_plan_is_unmetered() -> None:
    settings = Settings()
    assert settings.default_plan == "unmetered"
    assert settings.plan_catalog()["unmetered"].executes_per_month is None


def test_the_contracts_plans_are_kept() -> None:
    plans = Settings().plan_catalog()
    assert plans["free"].executes_per_month == 1_000
    assert plans["standard"].executes_per_month == 100_000
    assert plans["enterprise"].executes_per_month is None


def test_a_catalog_without_unmetered_has_no_default_plan() -> None:
    team = {"team": PlanSettings(executes_per_month=10, requests_per_minute=10)}
    assert Settings(plans=team).default_plan is None


def test_a_default_plan_outside_the_catalog_is_a_configuration_error() -> None:
    with pytest.raises(ValidationError, match="default_plan"):
        Settings(default_plan="gold")


@pytest.mark.anyio
async def test_org_created_without_a_plan_is_on_the_default_plan(
    client: httpx.AsyncClient,
) -> None:
    created = await client.post("/console/v1/orgs", json={"name": "Acme"}, headers=ADMIN)
    assert created.status_code == 201, created.text
    assert created.json()["plan"] == "unmetered"


@pytest.mark.anyio
async def test_unmetered_default_org_is_not_stopped_after_the_free_quota(
    client: httpx.AsyncClient,
) -> None:
    org_id = (await client.post("/console/v1/orgs", json={"name": "Acme"}, headers=ADMIN)).json()[
        "org_id"
    ]
    key = await client.post(f"/console/v1/orgs/{org_id}/keys", json={"name": "ci"}, headers=ADMIN)
    await client.put(
        f"/console/v1/orgs/{org_id}/policies/deploys", content=DEPLOY_POLICY, headers=ADMIN
    )
    auth = {"Authorization": f"Bearer {key.json()['api_key']}"}
    # Past what the free plan of this test catalog allows (``plans``: 3 a month).
    statuses = {(await client.post("/v1/execute", json=PERMIT, headers=auth)).status_code
                for _ in range(5)}  # fmt: skip
    assert statuses == {200}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("plans", "default_plan"),
    [({"team": PlanSettings(executes_per_month=10, requests_per_minute=10)}, None)],
    ids=["no-default"],
)
async def test_org_without_a_plan_is_400_when_no_default_plan_is_configured(
    client: httpx.AsyncClient,
) -> None:
    created = await client.post("/console/v1/orgs", json={"name": "Acme"}, headers=ADMIN)
    assert created.status_code == 400
    assert "plan" in created.json()["message"]
