"""Identifier randomness comes from a buffer of ``os.urandom`` bytes: never reused."""

from __future__ import annotations

import os

import pytest

from execauth.random_pool import RandomPool, random_bytes


def test_consecutive_takes_never_share_bytes() -> None:
    pool = RandomPool(block=64)
    taken = [pool.take(16) for _ in range(40)]  # several refills
    assert len(set(taken)) == len(taken)


def test_a_take_larger_than_the_block_comes_straight_from_the_kernel() -> None:
    assert len(RandomPool(block=8).take(32)) == 32


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_hands_out_its_parents_buffered_bytes() -> None:
    random_bytes(16)  # the buffer now holds bytes that the parent will hand out next
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os.write(write_end, random_bytes(16))
        os._exit(0)
    os.close(write_end)
    from_child = os.read(read_end, 16)
    os.close(read_end)
    os.waitpid(child, 0)
    assert len(from_child) == 16
    assert random_bytes(16) != from_child
