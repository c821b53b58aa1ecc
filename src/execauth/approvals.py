"""Human approval of an ESCALATE decision: the pure rules (docs/approvals.md).

Who may approve, self-approval, quorum and expiry, as functions of the terms the
ESCALATE was decided under, the votes so far and ``now``. No clock, no database:
``store.approvals`` applies them inside the transaction that holds the approval's lock.
Fail closed: only ``outcome`` can say ``approved``, and only with a quorum of distinct
approve votes, before the expiry, without any reject.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from execauth.wire_time import format_timestamp, parse_timestamp

State = Literal["pending", "approved", "rejected", "expired"]
FINAL_STATES: tuple[State, ...] = ("approved", "rejected", "expired")


@dataclass(frozen=True, slots=True)
class Terms:
    """What the ESCALATE asked for: stored with the execution when it was decided."""

    requester_key_id: str
    requester_actor: str | None
    roles: tuple[str, ...]
    keys: tuple[str, ...]
    quorum: int
    expires_at: datetime
    permit_ttl_seconds: int

    def as_json(self) -> dict[str, Any]:
        return {
            "requester_key_id": self.requester_key_id,
            "roles": list(self.roles),
            "keys": list(self.keys),
            "quorum": self.quorum,
            "permit_ttl_seconds": self.permit_ttl_seconds,
        }

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any], receipt: Mapping[str, Any]) -> Terms:
        """From the execution's evaluation input (``approval``) and its ESCALATE receipt."""
        return cls(
            requester_key_id=str(stored["requester_key_id"]),
            requester_actor=receipt.get("actor"),
            roles=tuple(stored["roles"]),
            keys=tuple(stored["keys"]),
            quorum=int(stored["quorum"]),
            expires_at=parse_timestamp(receipt["approval_expires_at"]),
            permit_ttl_seconds=int(stored["permit_ttl_seconds"]),
        )


@dataclass(frozen=True, slots=True)
class Vote:
    key_id: str
    vote: Literal["approve", "reject"]
    actor: str | None
    reason: str
    voted_at: datetime

    def as_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"key_id": self.key_id, "vote": self.vote}
        if self.actor is not None:
            entry["actor"] = self.actor
        entry["reason"] = self.reason
        entry["at"] = format_timestamp(self.voted_at)
        return entry


def refusal(
    terms: Terms,
    votes: Sequence[Vote],
    *,
    key_id: str,
    role: str,
    actor: str | None,
) -> str | None:
    """Why this key (speaking for ``actor``) may not vote on the approval; ``None``: it may."""
    if key_id == terms.requester_key_id:
        return "the key that requested the execution cannot approve it"
    if actor is not None and actor == terms.requester_actor:
        return f"actor {actor!r} requested the execution and cannot approve it"
    if role not in terms.roles and key_id not in terms.keys:
        return "this key is not among the rule's approvers"
    if any(v.key_id == key_id for v in votes):
        return "this key has already voted on this approval"
    if actor is not None and any(v.actor == actor for v in votes):
        return f"actor {actor!r} has already voted on this approval"
    return None


def outcome(terms: Terms, votes: Sequence[Vote], now: datetime) -> State:
    """The state the votes and the clock put the approval in.

    A reject is final whenever it came; expiry wins over approvals that did not
    reach the quorum in time (votes are refused once ``now >= expires_at``).
    """
    if any(v.vote == "reject" for v in votes):
        return "rejected"
    approvers = {v.key_id for v in votes if v.vote == "approve" and v.voted_at < terms.expires_at}
    if len(approvers) >= terms.quorum:
        return "approved"
    if now >= terms.expires_at:
        return "expired"
    return "pending"
