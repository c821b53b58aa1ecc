"""JSON views of control-plane objects, shared by the console and the operator surface."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from execauth.store.control import StoredPolicy
from execauth.store.executions import ExecutionRecord, LineageEvent
from execauth.tenancy.api_keys import ApiKey
from execauth.tenancy.audit import AuditEvent
from execauth.tenancy.orgs import Org
from execauth.wire_time import format_timestamp


def ts(value: datetime | None) -> str | None:
    return format_timestamp(value) if value is not None else None


def org_view(org: Org) -> dict[str, Any]:
    return {
        "org_id": org.org_id,
        "name": org.name,
        "plan": org.plan,
        "wire_profile": org.wire_profile,
        "created_at": ts(org.created_at),
        "disabled": org.disabled_at is not None,
        "disabled_at": ts(org.disabled_at),
    }


def key_view(key: ApiKey) -> dict[str, Any]:
    """Everything about a key except its secret, which is never stored."""
    return {
        "key_id": key.key_id,
        "org_id": key.org_id,
        "name": key.name,
        "role": key.role,
        "surfaces": list(key.surfaces),
        "created_at": ts(key.created_at),
        "expires_at": ts(key.expires_at),
        "revoked_at": ts(key.revoked_at),
        "last_used_at": ts(key.last_used_at),
        "rotated_at": ts(key.rotated_at),
        "previous_valid_until": ts(key.previous_valid_until),
    }


def policy_view(policy: StoredPolicy) -> dict[str, Any]:
    return {
        "policy_id": policy.policy_id,
        "version": policy.version,
        "policy_hash": policy.policy_hash,
        "created_at": ts(policy.created_at),
        "document": policy.document,
        "source": policy.source,
    }


def audit_view(event: AuditEvent) -> dict[str, Any]:
    return {
        "event_id": event.event_id,
        "org_id": event.org_id,
        "occurred_at": ts(event.occurred_at),
        "actor": event.actor,
        "action": event.action,
        "target": event.target,
        "details": event.details,
    }


def execution_summary(record: ExecutionRecord) -> dict[str, Any]:
    return {
        "execution_id": record.execution_id,
        "receipt_id": record.receipt_id,
        "decided_at": format_timestamp_ms(record.decided_at_ms),
        "surface": record.surface,
        "actor": record.actor,
        "decision": record.decision,
        "policy_id": record.policy_id,
        "policy_version": record.policy_version,
        "rule_id": record.rule_id,
        "reason": record.reason,
        "idempotency_key": record.idempotency_key,
    }


def execution_detail(record: ExecutionRecord, lineage: list[LineageEvent]) -> dict[str, Any]:
    stored = msgspec.json.decode(record.evaluation_input)
    return {
        **execution_summary(record),
        "request": stored.get("request"),
        "evaluated_at": stored.get("now"),
        "org_facts": stored.get("org"),
        "receipt": msgspec.json.decode(record.receipt),
        "lineage": [
            {"kind": e.kind, "occurred_at": ts(e.occurred_at), **e.details} for e in lineage
        ],
    }


def format_timestamp_ms(ms: int) -> str:
    return format_timestamp(datetime.fromtimestamp(ms / 1000, UTC))
