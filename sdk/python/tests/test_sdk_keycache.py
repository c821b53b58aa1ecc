"""The key list is cached for its cache_ttl (or the client's) and refetched for an
unknown key_id, which is how a verifier learns of a rotation."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest

from conftest import ScriptedService, Sleeps, receipt_for, vector_key
from execauth_client import AsyncClient, Client

BODY = {"surface": "deploy.production", "actor": "release-bot"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def client(service: ScriptedService, clock: Clock, **kw: Any) -> Client:
    return Client(
        "https://execauth.test",
        "k",
        transport=httpx.MockTransport(service),
        clock=clock,
        sleep=Sleeps(),
        **kw,
    )


def without_secondary(keys: dict[str, Any]) -> dict[str, Any]:
    secondary_id, _ = vector_key("secondary")
    trimmed = copy.deepcopy(keys)
    trimmed["keys"] = [k for k in trimmed["keys"] if k["key_id"] != secondary_id]
    return trimmed


def test_keys_are_cached_for_the_lists_cache_ttl(service: ScriptedService) -> None:
    clock = Clock()
    with client(service, clock) as c:
        c.keys()
        clock.now += 3599
        c.keys()
        assert service.key_fetches == 1
        clock.now += 1
        c.keys()
        assert service.key_fetches == 2


def test_the_clients_cache_ttl_overrides_the_lists(service: ScriptedService) -> None:
    clock = Clock()
    with client(service, clock, cache_ttl=10) as c:
        c.keys()
        clock.now += 9
        c.keys()
        assert service.key_fetches == 1
        clock.now += 1
        c.keys()
        assert service.key_fetches == 2


def test_refresh_forces_a_fetch(service: ScriptedService) -> None:
    with client(service, Clock()) as c:
        c.keys()
        c.keys(refresh=True)
    assert service.key_fetches == 2


def test_an_unknown_key_id_refreshes_the_cached_list(service: ScriptedService) -> None:
    clock = Clock()
    service.keys = without_secondary(service.keys)
    rotated = receipt_for(BODY, key_name="secondary")
    with client(service, clock) as c:
        c.keys()
        clock.now += 5
        service.keys = ScriptedService().keys  # the rotation is published
        verdict = c.verify(rotated)
    assert verdict.authentic, verdict
    assert service.key_fetches == 2


def test_unknown_keys_refresh_at_most_once_a_second(service: ScriptedService) -> None:
    clock = Clock()
    forged = receipt_for(BODY, key_name="unlisted")
    with client(service, clock) as c:
        c.keys()
        clock.now += 5
        assert c.verify(forged).reason == "unknown_key"
        assert c.verify(forged).reason == "unknown_key"
        assert service.key_fetches == 2
        clock.now += 1
        c.verify(forged)
        assert service.key_fetches == 3


def test_a_known_key_needs_no_refresh(service: ScriptedService) -> None:
    with client(service, Clock()) as c:
        assert c.verify(receipt_for(BODY)).authentic
        assert c.verify(receipt_for(BODY)).authentic
    assert service.key_fetches == 1


def test_an_unfetchable_key_list_fails_closed(service: ScriptedService) -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"error": "service_unavailable", "message": "down"})

    with (
        Client(
            "https://execauth.test", "k", transport=httpx.MockTransport(broken), max_retries=0
        ) as c,
        pytest.raises(Exception, match="service_unavailable"),
    ):
        c.verify(receipt_for(BODY))


@pytest.mark.anyio
async def test_async_client_caches_and_refreshes(service: ScriptedService) -> None:
    clock = Clock()
    service.keys = without_secondary(service.keys)
    async with AsyncClient(
        "https://execauth.test", "k", transport=httpx.MockTransport(service), clock=clock
    ) as c:
        await c.keys()
        await c.keys()
        assert service.key_fetches == 1
        clock.now += 2
        service.keys = ScriptedService().keys
        assert (await c.verify(receipt_for(BODY, key_name="secondary"))).authentic
    assert service.key_fetches == 2
