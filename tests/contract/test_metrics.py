"""GET /metrics: Prometheus text with decision, status and writer series."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Tenant, sequence

pytestmark = pytest.mark.anyio


async def test_metrics_count_decisions_statuses_and_commits(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    permit = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
    await client.post("/v1/execute", json=permit, headers=tenant.auth)
    await client.post("/v1/execute", json={"surface": "deploy.production"}, headers=tenant.auth)
    await client.post("/v1/execute", json={})
    text = (await client.get("/metrics")).text
    labels = f'org_id="{tenant.org_id}",surface="deploy.production"'
    assert f'execauth_decisions_total{{decision="PERMIT",{labels}}} 1.0' in text
    assert f'execauth_decisions_total{{decision="SILENCE",{labels}}} 1.0' in text
    assert 'execauth_execute_responses_total{status="200"} 2.0' in text
    assert 'execauth_execute_responses_total{status="401"} 1.0' in text
    assert "execauth_writer_batch_size_count 2.0" in text
    assert "execauth_execute_seconds_count 3.0" in text


async def metrics_after_one_sequenced_receipt(client: httpx.AsyncClient, tenant: Tenant) -> str:
    permit = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
    await client.post("/v1/execute", json=permit, headers=tenant.auth)
    sequence(client)
    return (await client.get("/metrics")).text


async def test_sequencing_is_counted_with_its_lag(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    text = await metrics_after_one_sequenced_receipt(client, tenant)
    assert "execauth_sequenced_receipts_total 1.0" in text
    assert "execauth_sequencer_lag_seconds_count 1.0" in text


async def test_each_sequencing_transaction_is_timed(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    text = await metrics_after_one_sequenced_receipt(client, tenant)
    assert "execauth_sequencer_transaction_seconds_count 1.0" in text
    [total] = [
        float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("execauth_sequencer_transaction_seconds_sum ")
    ]
    assert total > 0
