"""``RecentDecisions``: the committed answers a process keeps for repeats, the keys in flight."""

from __future__ import annotations

import asyncio

import pytest

from execauth.store.executions import PriorExecution
from execauth.usecases.recent_decisions import RecentDecisions

pytestmark = pytest.mark.anyio


def answer(decision: str = "PERMIT", execution_id: str = "exe_1") -> PriorExecution:
    return PriorExecution(execution_id, "sha256:ab", decision, b'{"receipt": 1}')


async def test_a_settled_answer_is_known_afterwards() -> None:
    recent = RecentDecisions()
    with recent.deciding("org_a", "k") as slot:
        slot.settle(answer())
    assert await recent.known("org_a", "k") == answer()


async def test_keys_of_two_organizations_are_apart() -> None:
    recent = RecentDecisions()
    recent.remember("org_a", "k", answer())
    assert await recent.known("org_b", "k") is None


async def test_an_escalate_is_not_kept() -> None:
    recent = RecentDecisions()
    recent.remember("org_a", "k", answer("ESCALATE"))
    assert await recent.known("org_a", "k") is None


async def test_the_oldest_answer_goes_first_beyond_the_bound() -> None:
    recent = RecentDecisions(max_entries=2)
    for key in ("k1", "k2", "k3"):
        recent.remember("org_a", key, answer(execution_id=key))
    assert len(recent) == 2
    assert await recent.known("org_a", "k1") is None
    assert [await recent.known("org_a", k) for k in ("k2", "k3")] == [
        answer(execution_id="k2"),
        answer(execution_id="k3"),
    ]


async def test_a_key_kept_again_makes_no_room_at_the_others_expense() -> None:
    recent = RecentDecisions(max_entries=2)
    recent.remember("org_a", "k1", answer(execution_id="k1"))
    recent.remember("org_a", "k2", answer(execution_id="k2"))
    recent.remember("org_a", "k2", answer(execution_id="k2"))
    assert await recent.known("org_a", "k1") == answer(execution_id="k1")


async def test_a_request_waiting_on_a_key_in_flight_gets_its_answer() -> None:
    recent = RecentDecisions()
    with recent.deciding("org_a", "k") as slot:
        waiter = asyncio.create_task(recent.known("org_a", "k"))
        await asyncio.sleep(0)  # the waiter is now waiting on the decision in flight
        assert not waiter.done()
        slot.settle(answer())
    assert await waiter == answer()


async def test_waiters_get_nothing_when_the_decision_in_flight_fails() -> None:
    recent = RecentDecisions()
    waiters: list[asyncio.Task[PriorExecution | None]] = []

    async def decide_and_fail() -> None:
        with recent.deciding("org_a", "k"):
            waiters.extend(asyncio.create_task(recent.known("org_a", "k")) for _ in range(2))
            await asyncio.sleep(0)
            raise RuntimeError("the writer went away")

    with pytest.raises(RuntimeError):
        await decide_and_fail()
    assert await asyncio.gather(*waiters) == [None, None]
    assert await recent.known("org_a", "k") is None  # nothing kept, nothing in flight


async def test_waiters_on_an_escalate_in_flight_get_nothing() -> None:
    recent = RecentDecisions()
    with recent.deciding("org_a", "k") as slot:
        waiter = asyncio.create_task(recent.known("org_a", "k"))
        await asyncio.sleep(0)
        slot.settle(answer("ESCALATE"))
    assert await waiter is None  # it takes the full path, which reads the approval's state


async def test_a_waiter_that_gives_up_leaves_the_answer_to_the_others() -> None:
    recent = RecentDecisions()
    with recent.deciding("org_a", "k") as slot:
        leaving = asyncio.create_task(recent.known("org_a", "k"))
        staying = asyncio.create_task(recent.known("org_a", "k"))
        await asyncio.sleep(0)
        leaving.cancel()
        await asyncio.sleep(0)
        slot.settle(answer())
    assert leaving.cancelled()
    assert await staying == answer()


async def test_a_second_decider_of_a_key_in_flight_does_not_replace_the_first() -> None:
    recent = RecentDecisions()
    with recent.deciding("org_a", "k") as first:
        waiter = asyncio.create_task(recent.known("org_a", "k"))
        await asyncio.sleep(0)
        with recent.deciding("org_a", "k"):
            pass  # ends without an answer: the first's waiters are unaffected
        assert not waiter.done()
        first.settle(answer())
    assert await waiter == answer()
