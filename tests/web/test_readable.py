"""Audit details as people read them (pure)."""

from __future__ import annotations

from execauth.web.readable import MAX_ITEMS, detail_items


def test_a_change_reads_from_arrow_to() -> None:
    assert detail_items({"plan": {"from": "free", "to": "standard"}}) == [
        ("plan", "free → standard")
    ]


def test_nested_keys_are_joined_with_dots() -> None:
    assert detail_items({"grace": {"seconds": 60}}) == [("grace.seconds", "60")]


def test_lists_none_and_booleans_read_as_words() -> None:
    items = detail_items({"surfaces": ["deploy.*", "data.export"], "expires_at": None, "ok": True})
    assert items == [("surfaces", "deploy.*, data.export"), ("expires_at", "—"), ("ok", "yes")]


def test_an_empty_list_reads_none() -> None:
    assert detail_items({"surfaces": []}) == [("surfaces", "none")]


def test_no_details_is_no_items() -> None:
    assert detail_items(None) == []


def test_a_huge_details_object_is_cut_and_says_so() -> None:
    items = detail_items({f"k{i}": i for i in range(MAX_ITEMS + 5)})
    assert len(items) == MAX_ITEMS + 1
    assert items[-1] == ("…", "5 more (see the JSON API)")
