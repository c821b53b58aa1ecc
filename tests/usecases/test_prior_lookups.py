"""Keys looked up together (usecases/prior_lookups.py): one read for a turn's requests."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from execauth.store.executions import PriorExecution
from execauth.usecases.prior_lookups import PriorLookups

pytestmark = pytest.mark.anyio
DEPLOYED = PriorExecution("service_exec_1", "sha256:aa", "PERMIT", b"{}")


class Reads:
    """Answers from a dict, noting each read it is asked for."""

    def __init__(self, stored: dict[tuple[str, str], PriorExecution]) -> None:
        self.stored = stored
        self.asked: list[dict[str, list[str]]] = []

    def __call__(self, keys: Mapping[str, list[str]]) -> dict[tuple[str, str], PriorExecution]:
        self.asked.append({org: sorted(wanted) for org, wanted in keys.items()})
        return {k: v for k, v in self.stored.items() if k[1] in keys.get(k[0], [])}


async def test_keys_asked_for_in_one_turn_are_read_together() -> None:
    reads = Reads({("org_a", "deploy-1"): DEPLOYED})
    lookups = PriorLookups(reads)

    found = await asyncio.gather(
        lookups.prior("org_a", "deploy-1"),
        lookups.prior("org_a", "deploy-2"),
        lookups.prior("org_b", "deploy-1"),
        lookups.prior("org_a", "deploy-1"),
    )

    assert list(found) == [DEPLOYED, None, None, DEPLOYED]
    assert reads.asked == [{"org_a": ["deploy-1", "deploy-2"], "org_b": ["deploy-1"]}]


async def test_keys_asked_for_after_a_read_started_get_a_read_of_their_own() -> None:
    reads = Reads({("org_a", "deploy-1"): DEPLOYED})
    lookups = PriorLookups(reads)

    first = await lookups.prior("org_a", "deploy-1")
    second = await lookups.prior("org_a", "deploy-2")

    assert (first, second) == (DEPLOYED, None)
    assert reads.asked == [{"org_a": ["deploy-1"]}, {"org_a": ["deploy-2"]}]


async def test_a_failed_read_fails_every_request_waiting_for_it() -> None:
    def unreadable(keys: Mapping[str, list[str]]) -> dict[tuple[str, str], PriorExecution]:
        raise ConnectionError("the database went away")

    lookups = PriorLookups(unreadable)

    outcomes = await asyncio.gather(
        lookups.prior("org_a", "deploy-1"), lookups.prior("org_b", "deploy-2"),
        return_exceptions=True,
    )  # fmt: skip

    assert [type(o) for o in outcomes] == [ConnectionError, ConnectionError]


async def test_a_request_that_gives_up_leaves_the_others_their_answer() -> None:
    reads = Reads({("org_a", "deploy-1"): DEPLOYED})
    lookups = PriorLookups(reads)
    leaving = asyncio.ensure_future(lookups.prior("org_a", "deploy-1"))
    staying = asyncio.ensure_future(lookups.prior("org_a", "deploy-1"))
    await asyncio.sleep(0)  # both have asked
    leaving.cancel()

    assert await staying == DEPLOYED
    assert leaving.cancelled()
