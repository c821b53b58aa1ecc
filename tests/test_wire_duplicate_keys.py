"""Duplicate object keys are found exactly (api/wire): a property test against a pair list.

msgspec keeps the last of duplicate keys, so ``_has_duplicate_keys`` counts colons
instead; these documents put colons in keys and strings, escaped or not, so that the
count would be fooled if the reasoning in its docstring were wrong.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from execauth.api.wire import _has_duplicate_keys

# A few short keys, some with colons, so that repeats are frequent.
KEYS = st.sampled_from(["a", "b", ":", "a:b", "é", "k"])
TEXT = st.text(alphabet=st.sampled_from('a:é\\"x'), max_size=6)


class Obj:
    """A JSON object as written: its members in order, repeats kept."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs


documents = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), TEXT),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(st.tuples(KEYS, inner), max_size=4).map(Obj),
    ),
    max_leaves=12,
)


def write(value: Any, escape_colons: bool, ascii_only: bool) -> str:
    if isinstance(value, Obj):
        members = (
            f"{write(k, escape_colons, ascii_only)}: {write(v, escape_colons, ascii_only)}"
            for k, v in value.pairs
        )
        return "{" + ", ".join(members) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(write(v, escape_colons, ascii_only) for v in value) + "]"
    text = json.dumps(value, ensure_ascii=ascii_only)
    if isinstance(value, str) and escape_colons:
        text = text.replace(":", "\\u003a")
    return text


def repeats_a_key(value: Any) -> bool:
    if isinstance(value, Obj):
        keys = [k for k, _ in value.pairs]
        return len(set(keys)) < len(keys) or any(repeats_a_key(v) for _, v in value.pairs)
    if isinstance(value, list):
        return any(repeats_a_key(v) for v in value)
    return False


@settings(max_examples=400, deadline=None)
@given(document=st.lists(st.tuples(KEYS, documents), max_size=4).map(Obj), escape=st.booleans(),
       ascii_only=st.booleans())  # fmt: skip
def test_a_repeated_key_is_found_exactly_when_one_was_written(
    document: Obj, escape: bool, ascii_only: bool
) -> None:
    body = write(document, escape, ascii_only).encode()
    decoded = msgspec.json.decode(body)
    assert _has_duplicate_keys(body, decoded) is repeats_a_key(document)
