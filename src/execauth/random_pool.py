"""Random bytes for identifiers, drawn from ``os.urandom`` in blocks.

Each request needs three random identifiers (request id, receipt id, the ULID's
randomness). One ``os.urandom`` call per identifier is a system call that
releases the GIL, and on a loaded server the receipt writer thread takes the
GIL in that moment and the event loop waits for it back (docs/performance.md).
Reading 4 KiB at a time makes that one call per ~150 requests. The bytes are
the kernel's CSPRNG output either way; only the call pattern changes.
"""

from __future__ import annotations

import os
import threading

_BLOCK = 4096


class RandomPool:
    def __init__(self, block: int = _BLOCK) -> None:
        self._block = block
        self._lock = threading.Lock()
        self._buffer = b""
        self._position = 0
        self._pid = -1

    def take(self, n: int) -> bytes:
        """``n`` fresh random bytes; never the same bytes twice, also across ``fork``."""
        if n > self._block:
            return os.urandom(n)
        with self._lock:
            # A forked child inherits the parent's buffer: refill so the two never
            # hand out the same bytes (same ids).
            if self._position + n > len(self._buffer) or self._pid != os.getpid():
                self._buffer = os.urandom(self._block)
                self._position = 0
                self._pid = os.getpid()
            start = self._position
            self._position = start + n
            return self._buffer[start : start + n]


_POOL = RandomPool()


def random_bytes(n: int) -> bytes:
    return _POOL.take(n)


def random_hex(n_bytes: int) -> str:
    return _POOL.take(n_bytes).hex()
