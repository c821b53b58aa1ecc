"""Organizations and the plan catalog."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from ulid import ULID

WIRE_PROFILES = ("a", "b")
ORG_NAME_MAX = 256
ORG_ID_PATTERN = re.compile(r"^org_[0-9a-z]{26}\Z")


@dataclass(frozen=True, slots=True)
class Plan:
    name: str
    executes_per_month: int | None  # None: unmetered
    requests_per_minute: int


# The contract's plans (docs/operations.md, "Plans"), plus ``unmetered``: a self-hosted
# service is nobody's metered customer, so an organization created without a plan gets
# no monthly quota (docs/decisions.md, "A self-hosted default"). The operator's catalog
# (``EXECAUTH_PLANS`` or ``[plans]`` in the TOML file) replaces this one as a whole.
DEFAULT_PLANS: dict[str, Plan] = {
    "free": Plan("free", 1_000, 5_000),
    "standard": Plan("standard", 100_000, 5_000),
    "enterprise": Plan("enterprise", None, 10_000),
    "unmetered": Plan("unmetered", None, 10_000),
}
DEFAULT_PLAN = "unmetered"


@dataclass(frozen=True, slots=True)
class Org:
    org_id: str
    name: str
    plan: str
    wire_profile: str
    created_at: datetime
    disabled_at: datetime | None = None

    def facts(self) -> dict[str, str]:
        """What policies see as ``org`` (stable fields only, so replay stays exact)."""
        return {"id": self.org_id, "plan": self.plan}


def new_org_id() -> str:
    return "org_" + str(ULID()).lower()
