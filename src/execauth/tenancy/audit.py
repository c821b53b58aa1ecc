"""The control-plane audit trail: who changed what, when (docs/api.md, "Surfaces").

Events are written in the same transaction as the change they describe, so the
trail can neither miss a change nor record one that did not happen; the table
refuses UPDATE and DELETE (migration 0003).
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ulid import ULID

PLATFORM_ADMIN = "platform-admin"


@dataclass(frozen=True, slots=True)
class AuditEvent:
    org_id: str | None  # None: a service-wide action (signing keys), shown to every org
    occurred_at: datetime
    actor: str  # "platform-admin", "key:<key_id>", "cli:<os user>"
    action: str  # org.created, org.plan_changed, api_key.issued, policy.published, ...
    target: str  # the id of what was acted on
    details: dict[str, Any] = field(default_factory=dict)
    event_id: str = field(default_factory=lambda: "evt_" + str(ULID()).lower())


def key_actor(key_id: str) -> str:
    return f"key:{key_id}"


def cli_actor() -> str:
    """The local operator running an ``execauth`` command against the database."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no passwd entry (containers)
        return "cli:unknown"


def org_change_actions(changes: dict[str, Any]) -> list[str]:
    """One audit action per kind of change, so the trail names each change on its own."""
    actions = []
    if "name" in changes:
        actions.append("org.renamed")
    if "plan" in changes:
        actions.append("org.plan_changed")
    if "wire_profile" in changes:
        actions.append("org.wire_profile_changed")
    if "disabled_at" in changes:
        actions.append("org.disabled" if changes["disabled_at"] is not None else "org.enabled")
    return actions
