"""What ``execauth policy sync`` publishes: the local documents that differ from the service.

A document is unchanged when its ``policy_hash`` (the SHA-256 of its RFC 8785 form, the
hash the service stores) equals that of the latest published version of the same
policy id: formatting, comments and key order do not count as changes, any change of
content does. Pure: the caller lists the published versions and publishes the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from execauth.policy.files import PolicyFile


@dataclass(frozen=True, slots=True)
class SyncStep:
    local: PolicyFile
    published_version: int | None  # None: no published policy has this id
    unchanged: bool


@dataclass(frozen=True, slots=True)
class SyncPlan:
    steps: tuple[SyncStep, ...]  # one per local file, in file order
    not_local: tuple[tuple[str, int], ...]  # (policy_id, version) published but not local

    @property
    def changed(self) -> tuple[SyncStep, ...]:
        return tuple(step for step in self.steps if not step.unchanged)


def plan_sync(local: Sequence[PolicyFile], published: Mapping[str, tuple[int, str]]) -> SyncPlan:
    """Compare checked local files with ``published`` (policy_id → (version, policy_hash))."""
    steps = []
    for checked in local:
        assert checked.document is not None, "only valid files are synced"
        version, published_hash = published.get(checked.policy_id, (None, None))
        same = published_hash == checked.document.policy_hash
        steps.append(SyncStep(checked, version, same))
    ids = {checked.policy_id for checked in local}
    others = tuple((pid, v) for pid, (v, _) in sorted(published.items()) if pid not in ids)
    return SyncPlan(tuple(steps), others)
