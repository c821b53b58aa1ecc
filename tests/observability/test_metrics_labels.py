"""Metrics users alert on: decisions by organization and surface (with a label budget),
refusals, quota use, pending approvals, writer and sequencer health, and their sums over
several processes (``serve --workers N``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from execauth.api.app import create_app
from execauth.config import PlanSettings
from execauth.observability.metrics import MULTIPROCESS_DIR_VARIABLE, OTHER, Metrics, StoreCollector
from execauth.serving.runtime import Runtime
from tests.approvals.conftest import ESCALATE_POLICY, Clock
from tests.conftest import Tenant, make_tenant, sequence, small_plans

pytestmark = pytest.mark.anyio
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
ESCALATE = {"surface": "deploy.production", "actor": "release-bot", "context": {"env": "prod"}}


@pytest.fixture
def plans() -> dict[str, PlanSettings]:
    # Two executes a month and three requests a minute: both refusals within a test.
    return small_plans(free_executes=2, per_minute=3)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def client(runtime: Runtime, clock: Clock) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(runtime, clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://execauth.test") as c:
            yield c


def samples(text: str | bytes) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition: (name, labels) → value."""
    if isinstance(text, bytes):
        text = text.decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str | bytes, name: str, **labels: str) -> float | None:
    return samples(text).get((name, frozenset(labels.items())))


async def scrape(client: httpx.AsyncClient) -> str:
    answer = await client.get("/metrics")
    assert answer.status_code == 200
    return answer.text


def collect(collector: StoreCollector) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in collector.collect()
        for s in family.samples
    }


# --- decisions by organization and surface --------------------------------------------
async def test_decisions_are_counted_by_organization_surface_and_decision(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    staging_request = {"surface": "deploy.staging", "payload": {"amount": 2}}
    staged = await client.post("/v1/execute", json=staging_request, headers=tenant.auth)
    assert staged.json()["decision"] == "PERMIT", staged.text
    text = await scrape(client)
    org = tenant.org_id
    permit = {"org_id": org, "surface": "deploy.production", "decision": "PERMIT"}
    staging = {"org_id": org, "surface": "deploy.staging", "decision": "PERMIT"}
    assert value(text, "execauth_decisions_total", **permit) == 1.0
    assert value(text, "execauth_decisions_total", **staging) == 1.0


async def test_an_idempotent_repeat_is_not_counted_as_a_decision(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    headers = {**tenant.auth, "Idempotency-Key": "once"}
    await client.post("/v1/execute", json=PERMIT, headers=headers)
    repeat = await client.post("/v1/execute", json=PERMIT, headers=headers)
    assert repeat.headers["Idempotent-Replayed"] == "true"
    labels = {"org_id": tenant.org_id, "surface": "deploy.production", "decision": "PERMIT"}
    assert value(await scrape(client), "execauth_decisions_total", **labels) == 1.0


def test_organizations_past_the_budget_are_counted_as_other() -> None:
    metrics = Metrics(max_orgs=2)
    for org in ("org_a", "org_b", "org_c", "org_d", "org_a"):
        metrics.count_decision(org, "deploy.production", "DENY")
    text = metrics.exposition()
    orgs = {
        dict(labels)["org_id"]: count
        for (name, labels), count in samples(text).items()
        if name == "execauth_decisions_total"
    }
    assert orgs == {"org_a": 2.0, "org_b": 1.0, OTHER: 2.0}


def test_surfaces_past_the_budget_are_counted_as_other() -> None:
    metrics = Metrics(max_surfaces=1)
    for surface in ("deploy.production", "minted.s1", "minted.s2", "deploy.production"):
        metrics.count_decision("org_a", surface, "PERMIT")
    text = metrics.exposition()
    surfaces = {
        dict(labels)["surface"]: count
        for (name, labels), count in samples(text).items()
        if name == "execauth_decisions_total"
    }
    assert surfaces == {"deploy.production": 2.0, OTHER: 2.0}


def test_a_folded_label_is_not_cached_per_raw_value() -> None:
    # A tenant minting surfaces must not grow the hot path's cache either.
    metrics = Metrics(max_surfaces=1)
    for index in range(50):
        metrics.count_decision("org_a", f"minted.s{index}", "PERMIT")
    assert len(metrics._decision_children) == 1


# --- refusals and quota -----------------------------------------------------------------
async def test_rate_limited_refusals_are_counted_per_organization(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    answers = [
        (await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)).status_code
        for _ in range(4)
    ]
    assert answers[-1] == 429
    text = await scrape(client)
    assert value(text, "execauth_rate_limited_total", org_id=tenant.org_id) == 1.0


async def test_quota_refusals_are_counted_per_organization(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    answers = [
        (await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)).status_code
        for _ in range(3)
    ]
    assert answers == [200, 200, 429]
    text = await scrape(client)
    assert value(text, "execauth_quota_exceeded_total", org_id=tenant.org_id) == 1.0
    assert value(text, "execauth_rate_limited_total", org_id=tenant.org_id) is None


async def test_quota_use_and_limit_are_reported_per_organization(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    text = await scrape(client)
    assert value(text, "execauth_quota_used_executes", org_id=tenant.org_id) == 1.0
    assert value(text, "execauth_quota_limit_executes", org_id=tenant.org_id) == 2.0


async def test_quota_reports_the_organizations_nearest_their_limit_first(
    client: httpx.AsyncClient, runtime: Runtime, clock: Clock
) -> None:
    near, far = await make_tenant(client), await make_tenant(client)
    await client.post("/v1/execute", json=PERMIT, headers=far.auth)
    for _ in range(2):
        await client.post("/v1/execute", json=PERMIT, headers=near.auth)
    figures = collect(StoreCollector(runtime.engine, runtime.plans, max_orgs=1, clock=clock))
    used = {
        dict(labels)["org_id"] for name, labels in figures if name == "execauth_quota_used_executes"
    }
    assert used == {near.org_id}


# --- approvals ----------------------------------------------------------------------------
async def test_pending_approvals_and_the_oldest_age_are_reported_per_organization(
    client: httpx.AsyncClient, runtime: Runtime, clock: Clock
) -> None:
    org = await make_tenant(client, policy=ESCALATE_POLICY.replace("QUORUM", "1"))
    for _ in range(2):
        answer = await client.post("/v1/execute", json=ESCALATE, headers=org.auth)
        assert answer.json()["decision"] == "ESCALATE"
        clock.advance(seconds=30)
    later = clock.now + timedelta(seconds=60)
    figures = collect(StoreCollector(runtime.engine, runtime.plans, clock=lambda: later))
    labels = frozenset({("org_id", org.org_id)})
    assert figures[("execauth_approvals_pending", labels)] == 2.0
    assert figures[("execauth_approvals_oldest_pending_seconds", labels)] == 120.0


async def test_approvals_past_the_organization_budget_are_summed_as_other(
    client: httpx.AsyncClient, runtime: Runtime, clock: Clock
) -> None:
    policy = ESCALATE_POLICY.replace("QUORUM", "1")
    busy, quiet, third = [await make_tenant(client, policy=policy) for _ in range(3)]
    for tenant, count in ((busy, 2), (quiet, 1), (third, 1)):
        for _ in range(count):
            await client.post("/v1/execute", json=ESCALATE, headers=tenant.auth)
    figures = collect(StoreCollector(runtime.engine, runtime.plans, max_orgs=1, clock=clock))
    pending = {
        dict(labels)["org_id"]: count
        for (name, labels), count in figures.items()
        if name == "execauth_approvals_pending"
    }
    assert pending == {busy.org_id: 2.0, OTHER: 2.0}


# --- the writer and the sequencer -------------------------------------------------------
async def test_the_sequencer_backlog_counts_receipts_not_yet_in_the_log(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime, clock: Clock
) -> None:
    await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    later = clock.now + timedelta(seconds=42)
    collector = StoreCollector(runtime.engine, runtime.plans, clock=lambda: later)
    before = collect(collector)
    assert before[("execauth_sequencer_pending_receipts", frozenset())] == 1.0
    assert before[("execauth_sequencer_oldest_pending_seconds", frozenset())] == 42.0
    sequence(client)
    after = collect(collector)
    assert after[("execauth_sequencer_pending_receipts", frozenset())] == 0.0
    assert after[("execauth_sequencer_oldest_pending_seconds", frozenset())] == 0.0


def test_a_commit_records_its_time_and_the_queue_behind_it() -> None:
    metrics = Metrics(clock=lambda: 1_795_000_000.0)
    metrics.watch_writer(lambda: 7)
    metrics.observe_commit(32, 0.004)
    text = metrics.exposition()
    assert value(text, "execauth_writer_last_commit_timestamp_seconds") == 1_795_000_000.0
    assert value(text, "execauth_writer_queue_depth") == 7.0
    assert value(text, "execauth_writer_batch_size_count") == 1.0


async def test_a_served_decision_leaves_the_writer_queue_empty(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    text = await scrape(client)
    assert value(text, "execauth_writer_queue_depth") == 0.0
    assert (value(text, "execauth_writer_last_commit_timestamp_seconds") or 0.0) > 0.0


async def test_writer_up_reports_a_running_writer(client: httpx.AsyncClient) -> None:
    assert value(await scrape(client), "execauth_writer_up") == 1.0


async def test_writer_up_reports_a_stopped_writer(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    runtime.writer.stop()
    assert value(await scrape(client), "execauth_writer_up") == 0.0


# --- several processes --------------------------------------------------------------------
RECORD = """
import sys
from execauth.observability.metrics import Metrics
metrics = Metrics(clock=lambda: float(sys.argv[1]))
metrics.watch_writer(lambda: int(sys.argv[2]))
metrics.count_decision("org_a", "deploy.production", "PERMIT")
metrics.count_rate_limited("org_a")
metrics.observe_commit(1, 0.001)
"""


def test_figures_of_several_processes_are_combined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As ``serve --workers N`` runs them: separate processes sharing one directory.
    directory = tmp_path / "metrics"
    directory.mkdir()
    env = {**os.environ, MULTIPROCESS_DIR_VARIABLE: str(directory)}
    for commit_time, queued in (("200", "5"), ("100", "0")):
        subprocess.run([sys.executable, "-c", RECORD, commit_time, queued], env=env, check=True)
    monkeypatch.setenv(MULTIPROCESS_DIR_VARIABLE, str(directory))
    text = Metrics().exposition()
    permit = {"org_id": "org_a", "surface": "deploy.production", "decision": "PERMIT"}
    assert value(text, "execauth_decisions_total", **permit) == 2.0
    assert value(text, "execauth_rate_limited_total", org_id="org_a") == 2.0
    # The latest commit of any process; the queue as the process that set it last saw it.
    assert value(text, "execauth_writer_last_commit_timestamp_seconds") == 200.0
    assert value(text, "execauth_writer_queue_depth") == 0.0
