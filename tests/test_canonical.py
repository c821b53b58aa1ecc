"""The canonical-JSON fast path is byte-identical to RFC 8785 (the ``rfc8785`` package)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from execauth.canonical import CanonicalizationError, canonical_form, canonical_json
from execauth.receipts import UNSIGNED_FIELDS
from tests.test_vectors import VECTORS, VectorCase

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)
# Keys and strings drawn from the places where the two sort orders or escapes could differ:
# controls, quotes, the BMP's private-use area, surrogates and astral characters.
tricky_text = st.text(
    alphabet=st.sampled_from(
        [
            *['"', "\\", "/", "\b", "\t", "\n", "\f", "\r", "\x00", "\x1f", "\x7f", "a", "Z"],
            *["\u00e9", "\u2028", "\ud7ff", "\ue000", "\uffff", "\U00010000", "\U0001f600"],
            *["\ud800", "\udfff"],
        ]
    ),
    max_size=6,
)
tricky_objects = st.dictionaries(tricky_text, tricky_text | st.integers(), max_size=6)


def _same_as_reference(value: Any) -> None:
    try:
        expected = rfc8785.dumps(value)
    except (CanonicalizationError, UnicodeError):
        with pytest.raises(CanonicalizationError):
            canonical_json(value)
        return
    assert canonical_json(value) == expected


@settings(max_examples=1500)
@given(json_values)
def test_canonical_json_matches_rfc8785_on_any_json_value(value: Any) -> None:
    _same_as_reference(value)


@settings(max_examples=1500)
@given(tricky_objects)
def test_canonical_json_matches_rfc8785_on_keys_and_strings_that_sort_or_escape_differently(
    value: dict[str, Any],
) -> None:
    _same_as_reference(value)


@pytest.mark.parametrize(
    "value",
    [2**53 - 1, -(2**53 - 1), 2**53, -(2**53), 10**30, 1.0, 0.1, 1e21, -0.0, 5e-324],
    ids=repr,
)
def test_canonical_json_matches_rfc8785_at_number_boundaries(value: Any) -> None:
    _same_as_reference({"n": value})


@settings(max_examples=500)
@given(json_values | tricky_objects)
def test_a_value_is_plain_only_if_it_is_strings_safe_integers_booleans_nulls_lists_and_objects(
    value: Any,
) -> None:
    try:
        _, plain = canonical_form(value)
    except CanonicalizationError:
        return  # no canonical form at all (a lone surrogate, an integer beyond 2^53)
    assert plain == _plain(value)


def _plain(value: Any) -> bool:
    """The definition, written out as a reference."""
    if isinstance(value, bool) or value is None:
        return True
    if type(value) is str:
        return True  # no lone surrogate: the value has a canonical form
    if type(value) is int:
        return abs(value) <= 2**53 - 1
    if type(value) is list:
        return all(map(_plain, value))
    if type(value) is dict:
        return all(
            type(k) is str and all(ord(c) <= 0xFFFF for c in k) and _plain(v)
            for k, v in value.items()
        )
    return False


@pytest.mark.parametrize("value", [0.5, {"\U00010000": 1}, (1, 2), [[1.0]]], ids=repr)
def test_a_float_an_astral_key_or_a_tuple_has_a_canonical_form_but_is_not_plain(
    value: Any,
) -> None:
    assert canonical_form(value) == (rfc8785.dumps(value), False)


def test_keys_are_ordered_by_utf16_code_units_not_code_points() -> None:
    # U+FFFF sorts after U+10000 in UTF-16 (0xFFFF > 0xD800) but before it by code point.
    value = {"\uffff": 1, "\U00010000": 2}
    assert canonical_json(value) == rfc8785.dumps(value)
    assert canonical_json(value).index("\U00010000".encode()) < canonical_json(value).index(
        "\uffff".encode()
    )


@pytest.mark.parametrize("case", VECTORS, ids=lambda case: case.name)
def test_canonical_json_matches_rfc8785_on_every_shared_vector(case: VectorCase) -> None:
    if isinstance(case.receipt, dict):
        _same_as_reference({k: v for k, v in case.receipt.items() if k not in UNSIGNED_FIELDS})


@pytest.mark.parametrize(
    "case",
    [c for c in VECTORS if c.expected["authentic"]],
    ids=lambda case: case.name,
)
def test_canonical_json_reproduces_the_signed_payload_of_every_authentic_vector(
    case: VectorCase,
) -> None:
    payload = json.loads((case.path).read_text(encoding="utf-8"))["signing_payload"]
    signed = {k: v for k, v in case.receipt.items() if k not in UNSIGNED_FIELDS}
    assert canonical_json(signed) == payload.encode("utf-8")
