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

    def take(self, n: int) -> bytes:
        """``n`` fresh random bytes; never the same bytes twice, also across ``fork``."""
        if n > self._block:
            return os.urandom(n)
        with self._lock:
            if self._position + n > len(self._buffer):
                self._buffer = os.urandom(self._block)
                self._position = 0
            start = self._position
            self._position = start + n
            return self._buffer[start : start + n]

    def discard(self) -> None:
        """Drop what is buffered (a forked child must not hand out its parent's bytes)."""
        self._lock = threading.Lock()  # the parent's may have been held at fork time
        self._buffer = b""
        self._position = 0


_POOL = RandomPool()
# A forked child inherits the parent's buffer: it refills, so the two never issue the
# same ids. (A pid check per call would be a system call per identifier.)
os.register_at_fork(after_in_child=_POOL.discard)


def random_bytes(n: int) -> bytes:
    return _POOL.take(n)


def random_hex(n_bytes: int) -> str:
    return _POOL.take(n_bytes).hex()
