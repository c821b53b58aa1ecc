"""Execute-request normalization (execauth.request): variants A–D of docs/api.md, "The request"."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import rfc8785

from execauth.errors import InvalidRequest
from execauth.request import ExecuteRequest, parse_execute_request

CANONICAL: dict[str, Any] = {
    "surface": "deploy.production",
    "actor": "release-bot",
    "action": "rollout",
    "context": {"branch": "main"},
    "payload": {"amount": 10},
    "request_id": "req-1",
}


def _expected_digest(normalized: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(normalized)).hexdigest()


def _parse(body: object, header: str | None = None) -> ExecuteRequest:
    return parse_execute_request(body, header)


@pytest.mark.parametrize(
    ("variant", "body", "header"),
    [
        (
            "A",
            {
                "surface": "deploy.production",
                "actor": "release-bot",
                "action": "rollout",
                "metadata": {"branch": "main"},
                "payload": {"amount": 10},
                "request_id": "req-1",
            },
            None,
        ),
        (
            "B",
            {
                "surface": "deploy.production",
                "actor": "release-bot",
                "action": "rollout",
                "context": {"branch": "main"},
                "payload": {"amount": 10},
                "idempotency_key": "req-1",
            },
            None,
        ),
        (
            "C",
            {
                "surface": "deploy.production",
                "actorId": "release-bot",
                "action": "rollout",
                "context": {"branch": "main"},
                "payload": {"amount": 10},
            },
            "req-1",
        ),
        (
            "D",
            {
                "surface_id": "deploy.production",
                "actor": "release-bot",
                "action": "rollout",
                "context": {"branch": "main"},
                "payload": {"amount": 10},
            },
            "req-1",
        ),
    ],
)
def test_every_wire_variant_normalizes_to_the_same_request(
    variant: str, body: dict[str, Any], header: str | None
) -> None:
    assert _parse(body, header) == _parse(CANONICAL), variant


def test_normalized_request_has_the_documented_fields() -> None:
    request = _parse(CANONICAL)
    assert request.surface == "deploy.production"
    assert request.actor == "release-bot"
    assert request.action == "rollout"
    assert request.context == {"branch": "main"}
    assert request.payload == {"amount": 10}
    assert request.idempotency_key == "req-1"


def test_optional_fields_default_to_none_and_empty_objects() -> None:
    request = _parse({"surface": "deploy.production"})
    assert request.actor is None
    assert request.action is None
    assert request.context == {}
    assert request.payload == {}
    assert request.idempotency_key is None


def test_metadata_and_context_are_merged_into_context() -> None:
    request = _parse(
        {"surface": "deploy.production", "metadata": {"a": 1}, "context": {"b": 2, "a": 1}}
    )
    assert request.context == {"a": 1, "b": 2}


def test_unknown_top_level_fields_are_ignored() -> None:
    assert _parse({**CANONICAL, "colour": "blue"}) == _parse(CANONICAL)


def test_request_digest_is_sha256_of_jcs_of_the_normalized_request() -> None:
    request = _parse(CANONICAL)
    expected = _expected_digest(
        {
            "surface": "deploy.production",
            "action": "rollout",
            "actor": "release-bot",
            "context": {"branch": "main"},
            "payload": {"amount": 10},
        }
    )
    assert request.digest == expected


def test_request_digest_covers_absent_optional_fields_as_null() -> None:
    request = _parse({"surface": "deploy.production"})
    expected = _expected_digest(
        {
            "surface": "deploy.production",
            "action": None,
            "actor": None,
            "context": {},
            "payload": {},
        }
    )
    assert request.digest == expected


def test_request_digest_does_not_depend_on_key_order() -> None:
    forward = {
        "surface": "deploy.production",
        "context": {"a": 1, "b": {"x": 1, "y": 2}},
        "payload": {"p": 1, "q": 2},
    }
    backward = {
        "payload": {"q": 2, "p": 1},
        "context": {"b": {"y": 2, "x": 1}, "a": 1},
        "surface": "deploy.production",
    }
    assert _parse(forward).digest == _parse(backward).digest


def test_request_digest_ignores_the_idempotency_key() -> None:
    assert _parse(CANONICAL).digest == _parse({**CANONICAL, "request_id": "other"}).digest


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("surface", "deploy.staging"),
        ("actor", "someone-else"),
        ("action", "rollback"),
        ("context", {"branch": "dev"}),
        ("payload", {"amount": 11}),
        ("payload", {"amount": 10, "currency": "EUR"}),
    ],
)
def test_request_digest_changes_when_any_field_changes(field: str, value: object) -> None:
    assert _parse({**CANONICAL, field: value}).digest != _parse(CANONICAL).digest


def test_evaluation_input_is_what_the_digest_covers() -> None:
    request = _parse(CANONICAL)
    assert _expected_digest(request.evaluation_input()) == request.digest


def test_a_request_of_strings_integers_booleans_and_nulls_is_plain() -> None:
    assert _parse({**CANONICAL, "payload": {"n": -(2**53 - 1), "ok": True, "x": None}}).plain


@pytest.mark.parametrize(
    "value", [1.5, ["a", 0.5], {"\U0001f600": 1}], ids=["float", "float-in-list", "astral-key"]
)
def test_a_request_holding_a_float_or_an_astral_key_is_not_plain(value: object) -> None:
    request = _parse({**CANONICAL, "payload": {"v": value}})
    assert not request.plain
    # Its digest comes from rfc8785 itself, as before the fast path.
    assert request.digest == _expected_digest(request.evaluation_input())


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "surface"),
        ({"surface": None}, "surface"),
        ({"surface": ""}, "surface"),
        ({"surface": 7}, "surface"),
        ({"surface": "deploy"}, "surface"),
        ({"surface": "Deploy.Production"}, "surface"),
        ({"surface": "deploy.*"}, "surface"),
        ({"surface": "d." + "x" * 127}, "surface"),
        ({"surface": "deploy.production", "actor": 5}, "actor"),
        ({"surface": "deploy.production", "actor": ""}, "actor"),
        ({"surface": "deploy.production", "action": ["x"]}, "action"),
        ({"surface": "deploy.production", "context": "branch=main"}, "context"),
        ({"surface": "deploy.production", "metadata": [1]}, "metadata"),
        ({"surface": "deploy.production", "payload": 3}, "payload"),
        ({"surface": "deploy.production", "request_id": 3}, "request_id"),
        ({"surface": "deploy.production", "idempotency_key": True}, "idempotency_key"),
    ],
)
def test_missing_or_invalid_field_is_invalid_request_naming_the_field(
    body: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        _parse(body)
    assert caught.value.code == "invalid_request"
    assert caught.value.status == 400
    assert field in caught.value.message


@pytest.mark.parametrize("body", [None, [], "surface", 3])
def test_body_that_is_not_an_object_is_invalid_request(body: object) -> None:
    with pytest.raises(InvalidRequest):
        _parse(body)


def test_surface_of_128_characters_is_accepted() -> None:
    surface = "d." + "x" * 126
    assert _parse({"surface": surface}).surface == surface


def test_surface_and_surface_id_that_disagree_are_invalid_request() -> None:
    with pytest.raises(InvalidRequest):
        _parse({"surface": "deploy.production", "surface_id": "deploy.staging"})


def test_actor_and_actor_id_that_disagree_are_invalid_request() -> None:
    with pytest.raises(InvalidRequest):
        _parse({"surface": "deploy.production", "actor": "a", "actorId": "b"})


def test_same_key_in_metadata_and_context_with_different_values_is_invalid_request() -> None:
    with pytest.raises(InvalidRequest) as caught:
        _parse({"surface": "deploy.production", "metadata": {"k": 1}, "context": {"k": 2}})
    assert "'k'" in caught.value.message


def test_true_and_1_in_metadata_and_context_are_different_values() -> None:
    # JSON true and 1 are different values, although Python compares them equal.
    with pytest.raises(InvalidRequest):
        _parse({"surface": "deploy.production", "metadata": {"k": True}, "context": {"k": 1}})


@pytest.mark.parametrize(
    ("body", "alias"),
    [
        ({"surface_id": 5}, "surface_id"),
        ({"surface": "deploy.production", "actorId": 5}, "actorId"),
    ],
)
def test_wrong_type_error_names_the_alias_that_was_sent(body: dict[str, Any], alias: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        _parse(body)
    assert repr(alias) in caught.value.message


@pytest.mark.parametrize(
    ("body", "header"),
    [
        ({"request_id": "a", "idempotency_key": "b"}, None),
        ({"request_id": "a"}, "b"),
        ({"idempotency_key": "a"}, "b"),
    ],
)
def test_distinct_idempotency_keys_are_invalid_request(
    body: dict[str, Any], header: str | None
) -> None:
    with pytest.raises(InvalidRequest):
        _parse({"surface": "deploy.production", **body}, header)


def test_the_same_idempotency_key_given_three_ways_is_accepted() -> None:
    request = _parse(
        {"surface": "deploy.production", "request_id": "k", "idempotency_key": "k"}, "k"
    )
    assert request.idempotency_key == "k"


@pytest.mark.parametrize("key", ["", "k" * 256])
def test_idempotency_key_outside_1_to_255_characters_is_invalid_request(key: str) -> None:
    with pytest.raises(InvalidRequest):
        _parse({"surface": "deploy.production", "request_id": key})


def test_idempotency_key_of_255_characters_is_accepted() -> None:
    key = "k" * 255
    assert _parse({"surface": "deploy.production", "request_id": key}).idempotency_key == key


def test_value_that_cannot_be_canonicalized_is_invalid_request() -> None:
    # RFC 8785 has no representation for integers beyond IEEE 754 double precision.
    with pytest.raises(InvalidRequest):
        _parse({"surface": "deploy.production", "payload": {"n": 2**64}})
