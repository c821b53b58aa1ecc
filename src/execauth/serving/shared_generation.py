"""A change counter shared by the worker processes of one ``execauth serve --workers N``.

Each worker caches API keys and policy sets for ``refresh_interval_seconds`` (1 s).
When one worker revokes a key (or publishes a policy), it empties its own caches at
once; the others would keep serving their copies until those expire. Through this
counter they learn at once: the changing worker increments it after its change is
committed, and every worker compares it with the value it last saw before it uses a
cached entry (docs/decisions.md, "revocation reaches every worker").

The counter is eight bytes of a small file that every worker maps into memory: a
read is a memory load (no system call on the request path); an increment takes an
``flock`` so that two concurrent changes cannot collapse into one step that a worker
might have seen already. Across instances (other hosts) the caches' ttl still bounds
how long a change takes.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct

_COUNTER = struct.Struct("<Q")


class SharedGeneration:
    def __init__(self, path: str) -> None:
        """Map the counter file at ``path``, creating it (zero) when absent."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < _COUNTER.size:
                os.ftruncate(fd, _COUNTER.size)
            self._map = mmap.mmap(fd, _COUNTER.size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def value(self) -> int:
        """The current generation (a plain load of the shared page)."""
        value: int = _COUNTER.unpack_from(self._map, 0)[0]
        return value

    def bump(self) -> int:
        """Announce a committed change to every process; returns the new generation."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            value = self.value() + 1
            _COUNTER.pack_into(self._map, 0, value)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        return value

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)


class GenerationWatch:
    """One cache's view of a ``SharedGeneration``: has anyone changed anything since?"""

    def __init__(self, shared: SharedGeneration | None) -> None:
        self._shared = shared
        self._seen = shared.value() if shared is not None else 0

    def changed_elsewhere(self) -> bool:
        """True once per new generation (always False without a shared counter)."""
        if self._shared is None:
            return False
        current = self._shared.value()
        if current == self._seen:
            return False
        self._seen = current
        return True

    def announce(self) -> None:
        """Tell the other processes that this one changed something.

        ``_seen`` stays behind on purpose: another process's change announced just
        before ours must still empty this cache (once more, at worst).
        """
        if self._shared is not None:
            self._shared.bump()
