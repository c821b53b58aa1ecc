"""Heavy work rests once per used-up slice, so that the event loop gets the GIL."""

from __future__ import annotations

from execauth.pacing import Pacer


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_work_within_a_slice_does_not_rest() -> None:
    time = FakeTime()
    pace = Pacer(work_seconds=2.0, rest_seconds=1.0, clock=time.clock, sleep=time.sleep)
    for _ in range(3):  # units of 0.5 s (exact in binary): 1.5 s of a 2 s slice
        time.now += 0.5
        pace()
    assert time.slept == []


def test_each_used_up_slice_is_followed_by_one_rest() -> None:
    time = FakeTime()
    pace = Pacer(work_seconds=2.0, rest_seconds=1.0, clock=time.clock, sleep=time.sleep)
    for _ in range(20):  # 20 units of 0.5 s: five slices of 2 s
        time.now += 0.5
        pace()
    assert time.slept == [1.0] * 5
