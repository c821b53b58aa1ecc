"""RFC 9162 Merkle trees: known answers from the reference tree, and properties of every tree.

Known-answer vectors are the 8-leaf reference tree of RFC 6962 as published by
github.com/transparency-dev/merkle (successor of google/certificate-transparency-go's
merkletree tests):
- leaves, roots per size and node hashes: testonly/constants.go (LeafInputs,
  RootHashes, NodeHashes);
- inclusion and consistency proofs (hash values): proof/verify_test.go
  (inclusionProofs, consistencyProofs; its leaf numbers are 1-based);
- which subtrees a proof is made of: proof/proof_test.go (TestInclusion,
  TestConsistency), translated from node IDs to leaf ranges [start, end).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from execauth.ledger.merkle import (
    EMPTY_ROOT,
    ProofError,
    RootMismatchError,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    merkle_root,
    node_hash,
    root_from_inclusion_proof,
    roots_from_consistency_proof,
    subtree_roots,
    verify_consistency,
    verify_inclusion,
)
from tests.store.test_ledger import root_from_inclusion, roots_from_consistency

h = bytes.fromhex

# testonly/constants.go LeafInputs()
LEAF_DATA = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    b"\x50\x51\x52\x53\x54\x55\x56\x57",
    b"\x60\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e\x6f",
]
LEAVES = [leaf_hash(d) for d in LEAF_DATA]

# testonly/constants.go NodeHashes()[0]: the leaf hashes.
KNOWN_LEAF_HASHES = [
    h("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
    h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
    h("0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7"),
    h("07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7"),
    h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
    h("4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658"),
    h("b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f"),
    h("46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1"),
]

# testonly/constants.go RootHashes(): index = tree size.
ROOTS = [
    h("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    h("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
    h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"),
    h("aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77"),
    h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
    h("4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4"),
    h("76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef"),
    h("ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c"),
    h("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"),
]

# proof/verify_test.go inclusionProofs, as (0-based index, size, path).
INCLUSION_VECTORS = [
    (0, 1, []),
    (
        0,
        8,
        [
            h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
            h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            h("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
        ],
    ),
    (
        5,
        8,
        [
            h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
            h("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
            h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
    (2, 3, [h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")]),
    (
        1,
        5,
        [
            h("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
            h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
        ],
    ),
]

# proof/verify_test.go consistencyProofs, as (size1, size2, path).
CONSISTENCY_VECTORS = [
    (1, 1, []),
    (
        1,
        8,
        [
            h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
            h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            h("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
        ],
    ),
    (
        6,
        8,
        [
            h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
            h("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
            h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
    (
        2,
        5,
        [
            h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
        ],
    ),
    (
        6,
        7,
        [
            h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
            h("b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f"),
            h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
]

Range = tuple[int, int]

# proof/proof_test.go TestInclusion: (size, index) -> subtrees of the path, leaf to root.
# Node id(level, i) is the range [i·2^level, (i+1)·2^level); a "rehash" group is
# the one ragged subtree it hashes up to.
INCLUSION_SHAPES: list[tuple[int, int, list[Range]]] = [
    (1, 0, []),
    (2, 0, [(1, 2)]),
    (2, 1, [(0, 1)]),
    (3, 1, [(0, 1), (2, 3)]),
    (7, 0, [(1, 2), (2, 4), (4, 7)]),
    (7, 1, [(0, 1), (2, 4), (4, 7)]),
    (7, 2, [(3, 4), (0, 2), (4, 7)]),
    (7, 3, [(2, 3), (0, 2), (4, 7)]),
    (7, 4, [(5, 6), (6, 7), (0, 4)]),
    (7, 5, [(4, 5), (6, 7), (0, 4)]),
    (7, 6, [(4, 6), (0, 4)]),
    (4, 2, [(3, 4), (0, 2)]),
    (5, 3, [(2, 3), (0, 2), (4, 5)]),
    (6, 3, [(2, 3), (0, 2), (4, 6)]),
    (6, 4, [(5, 6), (0, 4)]),
    (15, 10, [(11, 12), (8, 10), (12, 15), (0, 8)]),
    (31, 24, [(25, 26), (26, 28), (28, 31), (16, 24), (0, 16)]),
    (95, 81, [(80, 81), (82, 84), (84, 88), (88, 95), (64, 80), (0, 64)]),
]

# proof/proof_test.go TestConsistency: (size1, size2) -> subtrees of the proof.
CONSISTENCY_SHAPES: list[tuple[int, int, list[Range]]] = [
    (1, 2, [(1, 2)]),
    (1, 4, [(1, 2), (2, 4)]),
    (1, 6, [(1, 2), (2, 4), (4, 6)]),
    (2, 3, [(2, 3)]),
    (2, 8, [(2, 4), (4, 8)]),
    (3, 7, [(2, 3), (3, 4), (0, 2), (4, 7)]),
    (4, 7, [(4, 7)]),
    (5, 7, [(4, 5), (5, 6), (6, 7), (0, 4)]),
    (6, 7, [(4, 6), (6, 7), (0, 4)]),
    (7, 8, [(6, 7), (7, 8), (4, 6), (0, 4)]),
    *[(n, n, []) for n in (1, 2, 3, 4, 5, 7, 8)],
    (2, 4, [(2, 4)]),
    (3, 5, [(2, 3), (3, 4), (0, 2), (4, 5)]),
    (3, 6, [(2, 3), (3, 4), (0, 2), (4, 6)]),
    (4, 6, [(4, 6)]),
    (1, 7, [(1, 2), (2, 4), (4, 7)]),
    (10, 15, [(8, 10), (10, 12), (12, 15), (0, 8)]),
    (24, 31, [(16, 24), (24, 31), (0, 16)]),
    (81, 95, [(80, 81), (81, 82), (82, 84), (84, 88), (88, 95), (64, 80), (0, 64)]),
]


class RecordingSubtrees:
    """A ``SubtreeRoot`` that answers each range with a label and remembers what was asked."""

    def __init__(self) -> None:
        self.asked: list[Range] = []

    def __call__(self, start: int, end: int) -> bytes:
        self.asked.append((start, end))
        return f"{start}:{end}".encode()


def labels(ranges: list[Range]) -> list[bytes]:
    return [f"{s}:{e}".encode() for s, e in ranges]


# --- an independent reference: RFC 9162 §2.1 recursions, written out literally ---------
def ref_mth(leaves: list[bytes]) -> bytes:
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + ref_mth(leaves[:k]) + ref_mth(leaves[k:])).digest()


def ref_path(m: int, leaves: list[bytes]) -> list[bytes]:
    if len(leaves) == 1:
        return []
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    if m < k:
        return [*ref_path(m, leaves[:k]), ref_mth(leaves[k:])]
    return [*ref_path(m - k, leaves[k:]), ref_mth(leaves[:k])]


def ref_subproof(m: int, leaves: list[bytes], whole: bool) -> list[bytes]:
    if m == len(leaves):
        return [] if whole else [ref_mth(leaves)]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    if m <= k:
        return [*ref_subproof(m, leaves[:k], whole), ref_mth(leaves[k:])]
    return [*ref_subproof(m - k, leaves[k:], False), ref_mth(leaves[:k])]


def make_leaves(n: int, salt: int = 0) -> list[bytes]:
    return [leaf_hash(f"{salt}/{i}".encode()) for i in range(n)]


def accepted(probe: Callable[[], None]) -> bool:
    """Whether a verification passes (``ProofError`` is the only expected failure)."""
    try:
        probe()
    except ProofError:
        return False
    return True


def flip(data: bytes, i: int) -> bytes:
    return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]


def flip_at(path: list[bytes], element: int, byte: int) -> list[bytes]:
    return [flip(p, byte) if i == element else p for i, p in enumerate(path)]


# --- hashing ----------------------------------------------------------------------------
def test_leaf_hash_prefixes_zero_byte() -> None:
    assert leaf_hash(b"abc") == hashlib.sha256(b"\x00abc").digest()


def test_node_hash_prefixes_one_byte() -> None:
    assert (
        node_hash(b"L" * 32, b"R" * 32) == hashlib.sha256(b"\x01" + b"L" * 32 + b"R" * 32).digest()
    )


def test_reference_leaves_hash_to_published_leaf_hashes() -> None:
    assert LEAVES == KNOWN_LEAF_HASHES


def test_empty_tree_root_is_sha256_of_nothing() -> None:
    assert merkle_root([]) == EMPTY_ROOT == ROOTS[0]


@pytest.mark.parametrize("size", range(9))
def test_root_of_reference_tree_matches_published_root(size: int) -> None:
    assert merkle_root(LEAVES[:size]) == ROOTS[size]


def test_subtree_roots_answer_any_range_of_the_reference_tree() -> None:
    roots = subtree_roots(LEAVES)
    for start in range(8):
        for end in range(start + 1, 9):
            assert roots(start, end) == ref_mth(LEAVES[start:end])


@pytest.mark.parametrize(("start", "end"), [(0, 0), (3, 2), (-1, 2), (0, 9)])
def test_subtree_roots_refuse_empty_or_outside_ranges(start: int, end: int) -> None:
    with pytest.raises(ProofError):
        subtree_roots(LEAVES)(start, end)


# --- inclusion: known answers -----------------------------------------------------------
@pytest.mark.parametrize(("index", "size", "path"), INCLUSION_VECTORS)
def test_inclusion_proof_matches_published_vector(index: int, size: int, path: list[bytes]) -> None:
    assert inclusion_proof(index, size, subtree_roots(LEAVES[:size])) == path


@pytest.mark.parametrize(("index", "size", "path"), INCLUSION_VECTORS)
def test_published_inclusion_proof_verifies(index: int, size: int, path: list[bytes]) -> None:
    assert root_from_inclusion_proof(index, size, LEAVES[index], path) == ROOTS[size]
    verify_inclusion(index, size, LEAVES[index], path, ROOTS[size])


@pytest.mark.parametrize(("size", "index", "shape"), INCLUSION_SHAPES)
def test_inclusion_proof_is_made_of_published_subtrees(
    size: int, index: int, shape: list[Range]
) -> None:
    source = RecordingSubtrees()
    assert inclusion_proof(index, size, source) == labels(shape)


@pytest.mark.parametrize(("index", "size"), [(0, 0), (1, 0), (2, 1), (3, 0), (8, 7), (-1, 4)])
def test_inclusion_proof_of_index_outside_tree_is_proof_error(index: int, size: int) -> None:
    with pytest.raises(ProofError):
        inclusion_proof(index, size, RecordingSubtrees())


def test_inclusion_proof_asks_one_subtree_root_per_level() -> None:
    source = RecordingSubtrees()
    path = inclusion_proof(81, 95, source)
    assert len(source.asked) == len(path) == 6  # never a pass over the whole log


# Corruptions after transparency-dev/merkle proof/verify_test.go corruptInclusionProof.
def inclusion_corruptions(
    index: int, size: int, path: list[bytes], root: bytes, leaf: bytes
) -> list[tuple[str, Callable[[], None]]]:
    some_hash = h("abacaba000000000000000000000000000000000000000000060061e00123456")
    probes: list[tuple[str, int, int, bytes, list[bytes], bytes]] = [
        ("index - 1", index - 1, size, leaf, path, root),
        ("index + 1", index + 1, size, leaf, path, root),
        ("index ^ 2", index ^ 2, size, leaf, path, root),
        ("size * 2", index, size * 2, leaf, path, root),
        ("size // 2", index, size // 2, leaf, path, root),
        ("wrong leaf", index, size, b"WrongLeaf", path, root),
        ("empty root", index, size, leaf, path, EMPTY_ROOT),
        ("random root", index, size, leaf, path, some_hash),
        ("trailing garbage", index, size, leaf, [*path, b""], root),
        ("trailing root", index, size, leaf, [*path, root], root),
        ("preceding garbage", index, size, leaf, [b"", *path], root),
        ("preceding root", index, size, leaf, [root, *path], root),
    ]
    for i in range(len(path)):
        probes.append(
            (
                f"flipped path[{i}]",
                index,
                size,
                leaf,
                [*path[:i], flip(path[i], 0), *path[i + 1 :]],
                root,
            )
        )
    if path:
        probes.append(("removed component", index, size, leaf, path[:-1], root))
    if len(path) > 1:
        probes.append(
            ("inserted component", index, size, leaf, [path[0], some_hash, *path[1:]], root)
        )
    return [(desc, partial(verify_inclusion, i, s, lf, p, r)) for desc, i, s, lf, p, r in probes]


@pytest.mark.parametrize(("index", "size", "path"), INCLUSION_VECTORS[1:])
def test_corrupted_published_inclusion_proof_fails(
    index: int, size: int, path: list[bytes]
) -> None:
    probes = inclusion_corruptions(index, size, path, ROOTS[size], LEAVES[index])
    assert [desc for desc, probe in probes if accepted(probe)] == []


def test_single_leaf_tree_proves_its_leaf_with_empty_path() -> None:
    leaf = leaf_hash(b"data")
    verify_inclusion(0, 1, leaf, [], leaf)
    with pytest.raises(ProofError):
        verify_inclusion(0, 1, leaf, [], b"")
    with pytest.raises(ProofError):
        verify_inclusion(0, 1, b"", [], leaf)


def test_wrong_root_is_root_mismatch_not_just_proof_error() -> None:
    index, size, path = INCLUSION_VECTORS[1]
    with pytest.raises(RootMismatchError):
        verify_inclusion(index, size, LEAVES[index], path, ROOTS[size - 1])


# --- consistency: known answers ---------------------------------------------------------
@pytest.mark.parametrize(("first", "second", "path"), CONSISTENCY_VECTORS)
def test_consistency_proof_matches_published_vector(
    first: int, second: int, path: list[bytes]
) -> None:
    assert consistency_proof(first, second, subtree_roots(LEAVES[:second])) == path


@pytest.mark.parametrize(("first", "second", "path"), CONSISTENCY_VECTORS)
def test_published_consistency_proof_verifies(first: int, second: int, path: list[bytes]) -> None:
    verify_consistency(first, second, ROOTS[first], ROOTS[second], path)


@pytest.mark.parametrize(("first", "second", "shape"), CONSISTENCY_SHAPES)
def test_consistency_proof_is_made_of_published_subtrees(
    first: int, second: int, shape: list[Range]
) -> None:
    assert consistency_proof(first, second, RecordingSubtrees()) == labels(shape)


@pytest.mark.parametrize(("first", "second"), [(5, 0), (9, 8), (-1, 3)])
def test_consistency_proof_backwards_in_time_is_proof_error(first: int, second: int) -> None:
    with pytest.raises(ProofError):
        consistency_proof(first, second, RecordingSubtrees())


def test_consistency_from_empty_tree_is_empty_proof() -> None:
    assert consistency_proof(0, 8, RecordingSubtrees()) == []
    verify_consistency(0, 8, EMPTY_ROOT, ROOTS[8], [])


@pytest.mark.parametrize(
    ("first", "second", "first_root", "second_root", "path"),
    [
        (0, 0, ROOTS[1], ROOTS[1], []),  # the empty tree has exactly one root
        (1, 1, ROOTS[1], ROOTS[2], []),  # same size, different roots
        (1, 0, ROOTS[1], ROOTS[0], []),  # time travel
        (2, 1, ROOTS[2], ROOTS[1], []),
        (1, 2, ROOTS[1], ROOTS[2], []),  # a real extension needs a proof
        (0, 0, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT]),  # trivial proofs carry nothing
        (0, 1, EMPTY_ROOT, ROOTS[1], [EMPTY_ROOT]),
        (1, 1, ROOTS[1], ROOTS[1], [EMPTY_ROOT]),
    ],
)
def test_trivial_consistency_cases_are_strict(
    first: int, second: int, first_root: bytes, second_root: bytes, path: list[bytes]
) -> None:
    # After transparency-dev/merkle proof/verify_test.go TestVerifyConsistency.
    with pytest.raises(ProofError):
        verify_consistency(first, second, first_root, second_root, path)


@pytest.mark.parametrize(("first", "second", "path"), CONSISTENCY_VECTORS[1:])
def test_corrupted_published_consistency_proof_fails(
    first: int, second: int, path: list[bytes]
) -> None:
    # After transparency-dev/merkle proof/verify_test.go corruptConsistencyProof.
    r1, r2 = ROOTS[first], ROOTS[second]
    probes: list[tuple[str, int, int, bytes, bytes, list[bytes]]] = [
        ("first - 1", first - 1, second, r1, r2, path),
        ("first + 1", first + 1, second, r1, r2, path),
        ("first ^ 2", first ^ 2, second, r1, r2, path),
        ("second * 2", first, second * 2, r1, r2, path),
        ("second // 2", first, second // 2, r1, r2, path),
        ("wrong first root", first, second, b"WrongRoot", r2, path),
        ("wrong second root", first, second, r1, b"WrongRoot", path),
        ("swapped roots", first, second, r2, r1, path),
        ("empty proof", first, second, r1, r2, []),
        ("trailing garbage", first, second, r1, r2, [*path, b""]),
        ("trailing first root", first, second, r1, r2, [*path, r1]),
        ("trailing second root", first, second, r1, r2, [*path, r2]),
        ("preceding garbage", first, second, r1, r2, [b"", *path]),
        ("preceding first root", first, second, r1, r2, [r1, *path]),
        ("preceding second root", first, second, r1, r2, [r2, *path]),
        ("preceding path[0]", first, second, r1, r2, [path[0], *path]),
        ("truncated", first, second, r1, r2, path[:-1]),
    ]
    for i in range(len(path)):
        probes.append(
            (
                f"flipped path[{i}]",
                first,
                second,
                r1,
                r2,
                [*path[:i], flip(path[i], 0), *path[i + 1 :]],
            )
        )
    wrong = [
        desc
        for desc, m, n, fr, sr, p in probes
        if accepted(partial(verify_consistency, m, n, fr, sr, p))
    ]
    assert wrong == []


def test_roots_from_consistency_proof_rebuild_both_roots() -> None:
    for first, second, path in CONSISTENCY_VECTORS[1:]:
        assert roots_from_consistency_proof(first, second, ROOTS[first], path) == (
            ROOTS[first],
            ROOTS[second],
        )


# --- properties of every tree -----------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 200), salt=st.integers(0, 2**32))
def test_every_inclusion_proof_of_every_tree_verifies(size: int, salt: int) -> None:
    leaves = make_leaves(size, salt)
    roots = subtree_roots(leaves)
    root = merkle_root(leaves)
    assert root == ref_mth(leaves)
    for index in range(size):
        path = inclusion_proof(index, size, roots)
        assert path == ref_path(index, leaves)
        verify_inclusion(index, size, leaves[index], path, root)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), size=st.integers(1, 200), salt=st.integers(0, 2**32))
def test_flipping_any_byte_of_inclusion_proof_leaf_or_root_fails(
    data: st.DataObject, size: int, salt: int
) -> None:
    leaves = make_leaves(size, salt)
    index = data.draw(st.integers(0, size - 1), label="index")
    root = merkle_root(leaves)
    leaf = leaves[index]
    path = inclusion_proof(index, size, subtree_roots(leaves))
    for byte in range(32):
        with pytest.raises(RootMismatchError):
            verify_inclusion(index, size, flip(leaf, byte), path, root)
        with pytest.raises(RootMismatchError):
            verify_inclusion(index, size, leaf, path, flip(root, byte))
        for i in range(len(path)):
            bad = flip_at(path, i, byte)
            with pytest.raises(RootMismatchError):
                verify_inclusion(index, size, leaf, bad, root)


@settings(max_examples=40, deadline=None)
@given(size=st.integers(1, 120), salt=st.integers(0, 2**32))
def test_every_consistency_proof_of_every_tree_verifies(size: int, salt: int) -> None:
    leaves = make_leaves(size, salt)
    source = subtree_roots(leaves)
    second_root = merkle_root(leaves)
    for first in range(size + 1):
        path = consistency_proof(first, size, source)
        if 0 < first < size:
            assert path == ref_subproof(first, leaves, True)
        verify_consistency(first, size, merkle_root(leaves[:first]), second_root, path)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), size=st.integers(2, 200), salt=st.integers(0, 2**32))
def test_consistency_proof_with_a_mismatched_root_or_flipped_byte_fails(
    data: st.DataObject, size: int, salt: int
) -> None:
    leaves = make_leaves(size, salt)
    first = data.draw(st.integers(1, size - 1), label="first")
    r1, r2 = merkle_root(leaves[:first]), merkle_root(leaves)
    path = consistency_proof(first, size, subtree_roots(leaves))
    # A log that rewrote history: same sizes, one old leaf changed.
    forked = list(leaves)
    forked[data.draw(st.integers(0, first - 1), label="rewritten")] = leaf_hash(b"rewritten")
    with pytest.raises(RootMismatchError):
        verify_consistency(first, size, merkle_root(forked[:first]), r2, path)
    with pytest.raises(RootMismatchError):
        verify_consistency(first, size, r1, merkle_root(forked), path)
    byte = data.draw(st.integers(0, 31), label="byte")
    with pytest.raises(RootMismatchError):
        verify_consistency(first, size, flip(r1, byte), r2, path)
    with pytest.raises(RootMismatchError):
        verify_consistency(first, size, r1, flip(r2, byte), path)
    for i in range(len(path)):
        bad = flip_at(path, i, byte)
        with pytest.raises(RootMismatchError):
            verify_consistency(first, size, r1, r2, bad)


# --- every size 1..300, exhaustively ------------------------------------------------------
# Proofs checked by the independent RFC 9162 verifiers of tests/store/test_ledger.py
# against roots from ref_mth. Trees of every size are prefixes of one list of leaves, so
# each reference root is computed once.
EXHAUSTIVE = 300
_ALL_LEAVES = make_leaves(EXHAUSTIVE, salt=9162)
_REF_ROOTS = [ref_mth(_ALL_LEAVES[:size]) for size in range(EXHAUSTIVE + 1)]


def test_every_inclusion_proof_of_every_size_up_to_300_proves_the_reference_root() -> None:
    source = subtree_roots(_ALL_LEAVES)
    wrong = [
        (index, size)
        for size in range(1, EXHAUSTIVE + 1)
        for index in range(size)
        if root_from_inclusion(
            index, size, _ALL_LEAVES[index], inclusion_proof(index, size, source)
        )
        != _REF_ROOTS[size]
    ]
    assert wrong == []


def test_every_consistency_proof_of_every_size_up_to_300_links_the_reference_roots() -> None:
    source = subtree_roots(_ALL_LEAVES)
    wrong = [
        (first, second)
        for second in range(2, EXHAUSTIVE + 1)
        for first in range(1, second)
        if roots_from_consistency(
            first, second, _REF_ROOTS[first], consistency_proof(first, second, source)
        )
        != (_REF_ROOTS[first], _REF_ROOTS[second])
    ]
    assert wrong == []
