"""RFC 9162 §2.1 Merkle trees: hashing, roots, inclusion and consistency proofs.

Pure functions of their inputs. Proof *generation* reads the tree through a
``SubtreeRoot`` callable, ``MTH(D[start:end])``, so that the store can answer
from its stored nodes (O(log² n) lookups) while tests and small callers use
``subtree_roots(leaf_hashes)`` over a list in memory.

Verification convention: the ``root_from_*`` functions return what a proof
implies and raise ``ProofError`` when the proof cannot even be evaluated (wrong
length, bad index, a hash that is not 32 bytes); the ``verify_*`` functions
return ``None`` on success and raise ``RootMismatchError`` (a ``ProofError``)
otherwise. They never return ``False``: an ignored return value must not pass
for a verified proof.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Sequence
from typing import Protocol

HASH_SIZE = 32
LEAF_PREFIX = b"\x00"  # RFC 9162 §2.1.1: domain separation of leaves ...
NODE_PREFIX = b"\x01"  # ... from interior nodes (second-preimage resistance).
EMPTY_ROOT = hashlib.sha256(b"").digest()  # RFC 9162 §2.1.1: MTH({}) = HASH()

# MTH(D[start:end]) for 0 <= start < end <= tree size, as a leaf-hash tree.
SubtreeRoot = Callable[[int, int], bytes]


class ProofError(ValueError):
    """A proof, index or tree size that cannot be evaluated or does not verify."""


class RootMismatchError(ProofError):
    """A well-formed proof that leads to a different root than the one claimed."""


class LeafHashes(Protocol):
    """Leaf hashes in log order; a plain ``list[bytes]`` qualifies."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> bytes: ...


def leaf_hash(data: bytes) -> bytes:
    """RFC 9162 §2.1.1 leaf hash: SHA-256(0x00 || data)."""
    return hashlib.sha256(LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 §2.1.1 interior node hash: SHA-256(0x01 || left || right)."""
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def split_point(size: int) -> int:
    """The largest power of two strictly smaller than ``size`` (RFC 9162 §2.1.1 ``k``)."""
    if size < 2:
        raise ProofError(f"a tree of {size} leaves has no split")
    return 1 << ((size - 1).bit_length() - 1)


def merkle_root(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH of the leaves whose hashes are given (RFC 9162 §2.1.1), in O(n)."""
    if not leaf_hashes:
        return EMPTY_ROOT
    return subtree_roots(leaf_hashes)(0, len(leaf_hashes))


class _MemoryTree:
    """``SubtreeRoot`` over leaf hashes in memory, memoizing each aligned complete subtree.

    Aligned complete subtrees (size 2^k starting at a multiple of 2^k) are the
    nodes every tree size shares, so repeated proofs over the same leaves reuse
    them; a ragged right edge is recomputed from them in O(log n).
    """

    def __init__(self, leaves: LeafHashes) -> None:
        self._leaves = leaves
        self._memo: dict[tuple[int, int], bytes] = {}

    def __call__(self, start: int, end: int) -> bytes:
        if not 0 <= start < end <= len(self._leaves):
            raise ProofError(f"no subtree [{start}, {end}) in a tree of {len(self._leaves)}")
        size = end - start
        if size == 1:
            return self._leaves[start]
        aligned = size & (size - 1) == 0 and start % size == 0
        if aligned and (start, end) in self._memo:
            return self._memo[start, end]
        k = split_point(size)
        root = node_hash(self(start, start + k), self(start + k, end))
        if aligned:
            self._memo[start, end] = root
        return root


def subtree_roots(leaves: LeafHashes) -> SubtreeRoot:
    """A memoizing ``SubtreeRoot`` computed from leaf hashes held in memory."""
    return _MemoryTree(leaves)


# --- generation ------------------------------------------------------------------------
def inclusion_proof(index: int, size: int, subtree_root: SubtreeRoot) -> list[bytes]:
    """PATH(index, D[size]) (RFC 9162 §2.1.3.1): sibling hashes from the leaf up to the root."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is not in a tree of size {size}")
    path: list[bytes] = []
    start, end = 0, size
    # Walk down from the root; the recursion of §2.1.3.1 appends each sibling
    # *after* the deeper path, so the walk's order is reversed at the end.
    while end - start > 1:
        k = split_point(end - start)
        if index < start + k:
            path.append(subtree_root(start + k, end))
            end = start + k
        else:
            path.append(subtree_root(start, start + k))
            start += k
    path.reverse()
    return path


def consistency_proof(first: int, second: int, subtree_root: SubtreeRoot) -> list[bytes]:
    """PROOF(first, D[second]) (RFC 9162 §2.1.4.1); empty when first is 0 or equals second."""
    if not 0 <= first <= second:
        raise ProofError(f"no consistency proof from size {first} to size {second}")
    if first in (0, second):
        # Every tree extends the empty tree, and a tree is consistent with itself:
        # nothing to prove (RFC 9162 §2.1.4.1: SUBPROOF(m, D[m], true) = {}).
        return []
    path: list[bytes] = []
    start, end, m, whole = 0, second, first, True
    # SUBPROOF(m, D[start:end], whole), unrolled; as for inclusion, the deeper
    # part precedes the sibling in the proof, so the walk is reversed.
    while True:
        size = end - start
        if m == size:
            if not whole:
                path.append(subtree_root(start, end))
            break
        k = split_point(size)
        if m <= k:
            path.append(subtree_root(start + k, end))
            end = start + k
        else:
            path.append(subtree_root(start, start + k))
            start, m, whole = start + k, m - k, False
    path.reverse()
    return path


# --- verification ----------------------------------------------------------------------
def _check_hash(value: bytes, what: str) -> None:
    if len(value) != HASH_SIZE:
        raise ProofError(f"{what} is {len(value)} bytes, not a {HASH_SIZE}-byte SHA-256 hash")


def root_from_inclusion_proof(index: int, size: int, leaf: bytes, path: Sequence[bytes]) -> bytes:
    """The root that ``path`` implies for leaf hash ``leaf`` at ``index`` (RFC 9162 §2.1.3.2)."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is not in a tree of size {size}")
    _check_hash(leaf, "leaf hash")
    fn, sn, r = index, size - 1, leaf
    for i, p in enumerate(path):
        _check_hash(p, f"inclusion path[{i}]")
        if sn == 0:
            raise ProofError("inclusion path is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            # The right edge of a ragged tree: skip levels where this node has no sibling.
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion path is shorter than the tree is deep")
    return r


def verify_inclusion(
    index: int, size: int, leaf: bytes, path: Sequence[bytes], root: bytes
) -> None:
    """Check that ``leaf`` is at ``index`` of the tree of ``size`` with ``root``; raise if not."""
    _check_hash(root, "root hash")
    if not hmac.compare_digest(root_from_inclusion_proof(index, size, leaf, path), root):
        raise RootMismatchError(f"inclusion proof for leaf {index} of {size} gives another root")


def roots_from_consistency_proof(
    first: int, second: int, first_root: bytes, path: Sequence[bytes]
) -> tuple[bytes, bytes]:
    """The (first, second) roots ``path`` implies for 0 < first < second (RFC 9162 §2.1.4.2)."""
    if not 0 < first < second:
        raise ProofError(f"need 0 < first < second for a non-empty proof, got {first}, {second}")
    _check_hash(first_root, "first root")
    for i, c in enumerate(path):
        _check_hash(c, f"consistency path[{i}]")
    # §2.1.4.2 step 2: when first is a power of two its root is a node of the
    # second tree, left out of the proof; put it back in front.
    nodes = [first_root, *path] if first & (first - 1) == 0 else list(path)
    if not nodes:
        raise ProofError("consistency path is empty")
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = nodes[0]
    for c in nodes[1:]:
        if sn == 0:
            raise ProofError("consistency path is longer than the tree is deep")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("consistency path is shorter than the tree is deep")
    return fr, sr


def verify_consistency(
    first: int, second: int, first_root: bytes, second_root: bytes, path: Sequence[bytes]
) -> None:
    """Check that the tree of ``second`` with ``second_root`` extends the one of ``first``."""
    if not 0 <= first <= second:
        raise ProofError(f"no consistency proof from size {first} to size {second}")
    _check_hash(first_root, "first root")
    _check_hash(second_root, "second root")
    if first in (0, second):
        # Trivial cases carry no path; anything in it would be unverified data.
        if path:
            raise ProofError(f"a consistency proof from {first} to {second} must be empty")
        expected = EMPTY_ROOT if first == 0 else second_root
        if not hmac.compare_digest(first_root, expected):
            raise RootMismatchError(f"first root does not match a tree of size {first}")
        return
    fr, sr = roots_from_consistency_proof(first, second, first_root, path)
    if not hmac.compare_digest(fr, first_root):
        raise RootMismatchError(f"consistency proof gives another root for size {first}")
    if not hmac.compare_digest(sr, second_root):
        raise RootMismatchError(f"consistency proof gives another root for size {second}")
