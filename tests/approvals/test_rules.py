"""The pure approval rules (execauth.approvals): who may vote, quorum, rejection, expiry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from execauth.approvals import Terms, Vote, outcome, refusal

T0 = datetime(2026, 11, 24, 1, 0, tzinfo=UTC)
TERMS = Terms("key_req", "release-bot", ("admin",), ("key_named",), 2, T0 + timedelta(hours=1), 300)


def _approve(key_id: str, at: datetime = T0, actor: str | None = None) -> Vote:
    return Vote(key_id, "approve", actor, "", at)


def test_the_requesting_key_is_refused_even_with_an_approver_role() -> None:
    assert refusal(TERMS, [], key_id="key_req", role="admin", actor=None) is not None


def test_the_requesting_actor_is_refused_on_another_key() -> None:
    assert refusal(TERMS, [], key_id="key_a", role="admin", actor="release-bot") is not None


def test_a_named_key_may_approve_whatever_its_role() -> None:
    assert refusal(TERMS, [], key_id="key_named", role="execute", actor=None) is None


def test_a_role_the_rule_does_not_name_is_refused() -> None:
    assert refusal(TERMS, [], key_id="key_a", role="auditor", actor=None) is not None


def test_an_actor_counts_once_across_keys() -> None:
    votes = [_approve("key_a", actor="alice")]
    assert refusal(TERMS, votes, key_id="key_b", role="admin", actor="alice") is not None


def test_one_approval_of_a_quorum_of_two_is_pending() -> None:
    assert outcome(TERMS, [_approve("key_a")], T0) == "pending"


def test_two_distinct_approvals_reach_a_quorum_of_two() -> None:
    assert outcome(TERMS, [_approve("key_a"), _approve("key_b")], T0) == "approved"


def test_a_reject_wins_over_any_number_of_approvals() -> None:
    votes = [_approve("key_a"), Vote("key_c", "reject", None, "no", T0), _approve("key_b")]
    assert outcome(TERMS, votes, T0) == "rejected"


def test_without_a_quorum_the_approval_expires_at_its_deadline() -> None:
    assert outcome(TERMS, [_approve("key_a")], TERMS.expires_at) == "expired"


def test_a_quorum_reached_before_the_deadline_stays_approved_after_it() -> None:
    votes = [_approve("key_a"), _approve("key_b")]
    assert outcome(TERMS, votes, TERMS.expires_at + timedelta(days=1)) == "approved"
