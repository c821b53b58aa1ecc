"""The SQLite writers' lock (store/database.py, ``WriterLock``): one writer at a time,
whether the writers are threads sharing one lock object or separate lock objects."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from execauth.store.database import WriterLock


def most_at_once(locks: list[WriterLock], threads_per_lock: int, rounds: int) -> int:
    inside = 0
    most = 0
    guard = threading.Lock()

    def work(lock: WriterLock) -> None:
        nonlocal inside, most
        for _ in range(rounds):
            with lock.held():
                with guard:
                    inside += 1
                    most = max(most, inside)
                time.sleep(0.0005)  # hold it long enough for the others to try
                with guard:
                    inside -= 1

    # Daemons: a deadlocked lock (what this guards against) must fail the test, not hang it.
    workers = [
        threading.Thread(target=work, args=(lock,), daemon=True)
        for lock in locks
        for _ in range(threads_per_lock)
    ]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + 30
    for worker in workers:
        worker.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(worker.is_alive() for worker in workers), "a writer never got the lock"
    return most


def test_threads_sharing_one_lock_take_turns(tmp_path: Path) -> None:
    lock = WriterLock(tmp_path / "db.writer-lock")
    assert most_at_once([lock], threads_per_lock=6, rounds=40) == 1


def test_threads_of_two_lock_objects_on_one_file_take_turns(tmp_path: Path) -> None:
    # Two instances on one SQLite file (tests and `serve --workers N` alike).
    path = tmp_path / "db.writer-lock"
    assert most_at_once([WriterLock(path), WriterLock(path)], threads_per_lock=6, rounds=40) == 1
