"""Surface patterns (execauth.surfaces): ``*`` is one segment, ``**`` one or more."""

from __future__ import annotations

import pytest

from execauth.surfaces import compile_surface_pattern


@pytest.mark.parametrize(
    ("pattern", "surface"),
    [
        ("deploy.*", "deploy.production"),
        ("deploy.*", "deploy.staging"),
        ("*.production", "deploy.production"),
        ("deploy.*.eu", "deploy.production.eu"),
    ],
)
def test_single_star_matches_exactly_one_segment(pattern: str, surface: str) -> None:
    assert compile_surface_pattern(pattern).matches(surface)


@pytest.mark.parametrize(
    ("pattern", "surface"),
    [
        ("deploy.*", "deploy.production.eu"),
        ("deploy.*", "deploy"),
        ("*.production", "eu.deploy.production"),
        ("deploy.*.eu", "deploy.eu"),
    ],
)
def test_single_star_does_not_match_zero_or_several_segments(pattern: str, surface: str) -> None:
    assert not compile_surface_pattern(pattern).matches(surface)


def test_single_star_does_not_match_an_empty_segment() -> None:
    # `*` stands for exactly one segment, and a segment is never empty.
    assert not compile_surface_pattern("deploy.*").matches("deploy.")


@pytest.mark.parametrize(
    "surface",
    ["deploy.production", "deploy.production.eu", "deploy.a.b.c.d"],
)
def test_double_star_matches_one_or_more_segments(surface: str) -> None:
    assert compile_surface_pattern("deploy.**").matches(surface)


@pytest.mark.parametrize("surface", ["deploy", "deploy.", "deployx.production", "data.export"])
def test_double_star_needs_at_least_one_segment_after_the_prefix(surface: str) -> None:
    assert not compile_surface_pattern("deploy.**").matches(surface)


def test_lone_double_star_matches_every_dotted_surface() -> None:
    pattern = compile_surface_pattern("**")
    assert pattern.matches("deploy.production")
    assert pattern.matches("a.b.c")


def test_star_inside_a_segment_is_a_wildcard_within_that_segment() -> None:
    pattern = compile_surface_pattern("deploy.prod-*")
    assert pattern.matches("deploy.prod-eu")
    assert pattern.matches("deploy.prod-")
    assert not pattern.matches("deploy.staging-eu")
    assert not pattern.matches("deploy.prod-eu.west")


def test_literal_pattern_matches_only_the_identical_surface() -> None:
    pattern = compile_surface_pattern("deploy.production")
    assert pattern.matches("deploy.production")
    assert not pattern.matches("deploy.productions")
    assert not pattern.matches("deploy.production.eu")
    assert not pattern.matches("xdeploy.production")


def test_dot_in_a_literal_pattern_is_not_a_regex_wildcard() -> None:
    assert not compile_surface_pattern("deploy.production").matches("deployxproduction")


def test_literal_pattern_is_exact_and_wildcards_are_not() -> None:
    assert compile_surface_pattern("deploy.production").is_exact
    assert not compile_surface_pattern("deploy.*").is_exact
    assert not compile_surface_pattern("deploy.**").is_exact


def test_more_literal_text_ranks_as_more_specific() -> None:
    assert (
        compile_surface_pattern("deploy.prod-*").literal_chars
        > compile_surface_pattern("deploy.*").literal_chars
    )


@pytest.mark.parametrize(
    "pattern",
    [
        "",
        "deploy",  # a single segment
        "Deploy.production",  # upper case
        "deploy..production",  # empty segment
        "deploy.production.",
        ".deploy",
        "deploy.***",
        "deploy.a**",
        "deploy.prod uction",
        "deploy/production",
        "d." + "x" * 127,  # 129 characters
    ],
)
def test_invalid_pattern_is_refused_with_value_error(pattern: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message varies by reason
        compile_surface_pattern(pattern)


def test_pattern_of_128_characters_is_accepted() -> None:
    text = "d." + "x" * 126
    assert len(text) == 128
    assert compile_surface_pattern(text).matches(text)
