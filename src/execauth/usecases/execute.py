"""The execute use case: authenticate, decide, sign, store, answer.

One request's way (docs/architecture.md, "One `POST /v1/execute`"): the API parses
the wire form into an ``ExecuteRequest`` and calls ``ExecutionService.execute``,
which asks tenancy who is calling, ``policy`` what to decide, ``receipts`` to sign,
and the writer to commit; only then is the receipt returned. Every failure raises an
``ExecauthError``; nothing here returns PERMIT except a PERMIT decision.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import anyio.to_thread
import msgspec

from execauth.approvals import State, Terms, Vote
from execauth.config import Settings
from execauth.errors import (
    Forbidden,
    IdempotencyConflict,
    InternalError,
    PolicyInvalid,
    QuotaExceeded,
    ReceiptIdTaken,
    SurfaceNotFound,
    Unauthorized,
)
from execauth.ledger.merkle import leaf_hash
from execauth.observability import tracing
from execauth.policy.decision import Decision, Outcome, PolicyRef
from execauth.policy.document import parse_policy_document
from execauth.policy.engine import CompiledPolicy, PolicySet, compile_policy, evaluate
from execauth.receipts import (
    RECEIPT_ID_DRAWS,
    approval_id_for,
    build_outcome_receipt,
    build_receipt,
    new_execution_id,
    new_receipt_id,
    sign_receipt,
)
from execauth.request import ExecuteRequest
from execauth.serving.runtime import Runtime
from execauth.serving.shared_generation import GenerationWatch, SharedGeneration
from execauth.store.approvals import Approval, ApprovalStore
from execauth.store.control import ControlStore, StoredPolicy
from execauth.store.executions import ExecutionRecord, PriorExecution, Repeat
from execauth.tenancy.api_keys import ApiKey, KeyMatch, hash_secret, is_well_formed_secret
from execauth.tenancy.orgs import Org, Plan
from execauth.tenancy.quota import UsedUpQuotas, quota_for
from execauth.tenancy.rate_limits import OrgRateLimiter, RateLimitState
from execauth.ttl_cache import TtlCache
from execauth.usecases.prior_lookups import PriorLookups
from execauth.usecases.recent_decisions import RecentDecisions
from execauth.wire_time import epoch_millis, format_timestamp, truncate_to_millis

Clock = Callable[[], datetime]
ReceiptIds = Callable[[datetime], str]
_MAX_CACHED_CREDENTIALS = 10_000
LAST_USED_RESOLUTION_SECONDS = 60.0


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Principal:
    match: KeyMatch  # the key, and whether its rotated-out secret was presented
    org: Org

    @property
    def api_key(self) -> ApiKey:
        return self.match.key


@dataclass(frozen=True, slots=True)
class ExecuteResult:
    receipt: bytes  # the response body
    decision: str
    repeated: bool  # an idempotent repeat answered from the store


class CredentialCache:
    """Bearer secret → principal, re-read from the database after ``ttl`` seconds.

    The short ttl bounds how long a revoked key keeps working on an instance that
    did not revoke it: within one second on every instance (docs/api.md,
    "Authentication").
    """

    def __init__(
        self, runtime: Runtime, ttl: float, shared: SharedGeneration | None = None
    ) -> None:
        self._runtime = runtime
        self._entries: TtlCache[str, Principal | None] = TtlCache(
            self._load, ttl=ttl, max_entries=_MAX_CACHED_CREDENTIALS
        )
        self._last_use_written: dict[str, float] = {}
        # Secrets seen well formed, with their keyed hash: a key used again (every request
        # of a client) skips the checksum and the HMAC, about 7 µs. Bounded like the
        # cache; what a secret grants is still looked up, and expires, through ``_entries``.
        self._hashes: dict[str, str] = {}
        # serve --workers N: a revocation in one worker empties every worker's cache.
        self._changes = GenerationWatch(shared)

    def invalidate(self) -> None:
        """Forget every principal, here and (through the shared counter) in sibling workers."""
        self._entries.invalidate()
        self._changes.announce()

    def secret_hash(self, secret: str) -> str | None:
        """The keyed hash a stored key is found by; ``None`` for a malformed secret
        (prefix, length, alphabet, checksum: refused without the database)."""
        known = self._hashes.get(secret)
        if known is not None:
            return known
        if not is_well_formed_secret(secret):
            return None
        if len(self._hashes) >= _MAX_CACHED_CREDENTIALS:
            self._hashes.clear()
        known = self._hashes[secret] = hash_secret(self._runtime.secret, secret)
        return known

    async def principal(self, secret_hash: str) -> Principal | None:
        if self._changes.changed_elsewhere():
            self._entries.invalidate()
        return await self._entries.get(secret_hash)

    def _load(self, secret_hash: str) -> Principal | None:
        match = self._runtime.control.api_key_by_secret_hash(secret_hash)
        if match is None:
            return None
        org = self._runtime.control.get_org(match.key.org_id)
        return Principal(match, org) if org is not None else None

    async def record_use(self, key_id: str, now: datetime) -> None:
        """Keep ``last_used_at`` to within a minute without a write per request."""
        last = self._last_use_written.get(key_id)
        if last is not None and time.monotonic() - last < LAST_USED_RESOLUTION_SECONDS:
            return
        self._last_use_written[key_id] = time.monotonic()
        if len(self._last_use_written) > _MAX_CACHED_CREDENTIALS:
            self._last_use_written.clear()
        await anyio.to_thread.run_sync(self._runtime.control.touch_api_key, key_id, now)


class PolicyCache:
    """An org's active ``PolicySet``; each version is compiled once and kept."""

    def __init__(
        self, control: ControlStore, ttl: float, shared: SharedGeneration | None = None
    ) -> None:
        self._control = control
        self._sets: TtlCache[str, PolicySet] = TtlCache(self._load, ttl=ttl)
        self._compiled: dict[tuple[str, str, int], CompiledPolicy] = {}
        self._changes = GenerationWatch(shared)

    def invalidate(self, org_id: str) -> None:
        self._sets.invalidate(org_id)
        self._changes.announce()

    async def policy_set(self, org_id: str) -> PolicySet:
        if self._changes.changed_elsewhere():
            self._sets.invalidate()  # which org changed is not shared: all of them
        return await self._sets.get(org_id)

    def _load(self, org_id: str) -> PolicySet:
        return PolicySet(self.compiled(stored) for stored in self._control.latest_policies(org_id))

    def compiled(self, stored: StoredPolicy) -> CompiledPolicy:
        """The compiled form of one stored version (compiled once, then kept)."""
        cache_key = (stored.org_id, stored.policy_id, stored.version)
        compiled = self._compiled.get(cache_key)
        if compiled is None:
            try:
                document = parse_policy_document(
                    msgspec.json.encode(stored.document).decode(), policy_id=stored.policy_id
                )
                compiled = compile_policy(
                    document, PolicyRef(stored.policy_id, stored.version, stored.policy_hash)
                )
            except PolicyInvalid as exc:
                # A stored version that no longer compiles must not be skipped: skipping
                # it could let a less specific block decide. Refuse the whole org instead.
                raise InternalError(
                    f"stored policy {stored.policy_id} v{stored.version} is unusable: {exc}"
                ) from exc
            self._compiled[cache_key] = compiled
        return compiled


def rate_limiter_for(settings: Settings, clock: Callable[[], float] = time.time) -> OrgRateLimiter:
    """The per-organization rate limiter ``settings`` describe: Redis if configured, else
    this process's share of each limit in memory, its window read from ``clock``."""
    return OrgRateLimiter(
        settings.redis_url,
        timeout_seconds=settings.rate_limit_timeout_seconds,
        prefix="execauth",
        processes=settings.workers or 1,
        clock=clock,
    )


class ExecutionService:
    def __init__(
        self,
        runtime: Runtime,
        *,
        clock: Clock = utc_now,
        shared_generation: SharedGeneration | None = None,
        receipt_ids: ReceiptIds = new_receipt_id,
    ) -> None:
        self.runtime = runtime
        self.clock = clock
        self.receipt_ids = receipt_ids
        ttl = runtime.settings.refresh_interval_seconds
        self.credentials = CredentialCache(runtime, ttl, shared_generation)
        self.policies = PolicyCache(runtime.control, ttl, shared_generation)
        self.rate_limiter = rate_limiter_for(runtime.settings)
        self.approvals = ApprovalStore(runtime.engine)
        self.recent = RecentDecisions()
        self.used_up_quotas = UsedUpQuotas(ttl)
        self.prior_lookups = PriorLookups(runtime.executions.by_idempotency_keys)

    async def authenticate(self, authorization: str | None) -> Principal:
        """Resolve ``Authorization: Bearer service_live_…`` to a usable execute key."""
        if not authorization:
            raise Unauthorized("missing Authorization: Bearer <API key>")
        scheme, _, secret = authorization.partition(" ")
        secret = secret.strip()
        secret_hash = self.credentials.secret_hash(secret) if scheme.lower() == "bearer" else None
        if secret_hash is None:
            raise Unauthorized("malformed API key")
        principal = await self.credentials.principal(secret_hash)
        now = self.clock()
        if principal is None or not principal.match.is_usable(now):
            raise Unauthorized("unknown, expired, rotated-out or revoked API key")
        if principal.org.disabled_at is not None:
            raise Unauthorized("the organization is disabled")
        await self.credentials.record_use(principal.api_key.key_id, now)
        return principal

    async def admit(self, principal: Principal) -> RateLimitState:
        """Count the request against its org's per-minute limit (``RateLimited`` when over)."""
        plan = self._plan(principal.org)
        return await self.rate_limiter.hit(principal.org.org_id, plan.requests_per_minute)

    def _plan(self, org: Org) -> Plan:
        """The org's plan; one the catalog no longer has is refused, never run unmetered."""
        plan = self.runtime.plans.get(org.plan)
        if plan is None:
            raise InternalError(f"organization {org.org_id} is on unknown plan {org.plan!r}")
        return plan

    async def execute(self, principal: Principal, request: ExecuteRequest) -> ExecuteResult:
        key, org = principal.api_key, principal.org
        if key.role != "execute":
            raise Forbidden(f"a key with role {key.role!r} cannot request executions")
        if not key.allows_surface(request.surface):
            raise Forbidden(f"this API key may not request surface {request.surface!r}")
        idempotency_key = request.idempotency_key
        if idempotency_key is None:
            return await self._decide(principal, request)
        # A repeat of a key decided here is answered from memory, before any evaluation,
        # signing or write of a record (usecases/recent_decisions.py).
        known = await self.recent.known(org.org_id, idempotency_key)
        if known is not None:
            return await self._repeat(org.org_id, known, request, counted=False)
        with self.recent.deciding(org.org_id, idempotency_key) as slot:
            return await self._decide(principal, request, slot.settle)

    async def _decide(
        self,
        principal: Principal,
        request: ExecuteRequest,
        committed: Callable[[PriorExecution], None] | None = None,
    ) -> ExecuteResult:
        """Evaluate, sign and store a new decision; ``committed`` is told what the key now
        stands for, once that is durable."""
        key, org = principal.api_key, principal.org
        # A cache miss reads the policy from the database: part of the step.
        with tracing.step("evaluate"):
            policy_set = await self.policies.policy_set(org.org_id)
            selected = policy_set.select(request.surface)
            if selected is None:
                repeated = await self._stored_repeat(org.org_id, request, committed)
                if repeated is not None:
                    return repeated
                raise SurfaceNotFound(f"no policy governs surface {request.surface!r}")
            policy, block = selected

            plan = self._plan(org)
            now = truncate_to_millis(self.clock())
            quota = quota_for(plan, now)
            if self.used_up_quotas.holds(org.org_id, quota):
                # Refused as the writer would refuse the record, without a decision; a
                # key decided before still gets its receipt, whatever the quota.
                repeated = await self._stored_repeat(org.org_id, request, committed)
                if repeated is not None:
                    return repeated
                raise quota.exceeded(now)
            evaluation_input = request.evaluation_input()
            org_facts = org.facts()
            decision = evaluate(
                block, evaluation_input, now=now, org=org_facts, request_converts=request.plain
            )
        stored_input: dict[str, object] = {
            "request": evaluation_input,
            "org": org_facts,
            "now": format_timestamp(now),
        }
        if decision.outcome is Outcome.ESCALATE:
            assert decision.escalation is not None
            # The approval's terms, kept with the execution (docs/approvals.md).
            stored_input["approval"] = {"requester_key_id": key.key_id,
                                        **decision.escalation.as_json()}  # fmt: skip
        execution_id = new_execution_id(now)
        # The same for every draw of a receipt id.
        stored_json = msgspec.json.encode(stored_input).decode()
        for draw in range(1, RECEIPT_ID_DRAWS + 1):
            record = self._signed_record(
                request, decision, policy.ref, org.org_id, execution_id, now, stored_json
            )
            try:
                with tracing.step("commit"):  # the wait until the receipt is durable
                    prior = await self.runtime.writer.write(record, quota)
                break
            except ReceiptIdTaken:
                # Nothing was stored: the same decision, signed again under a new receipt id.
                if draw == RECEIPT_ID_DRAWS:
                    raise
            except QuotaExceeded:
                self.used_up_quotas.remember(org.org_id, quota)
                raise
        body = record.receipt
        if prior is not None:
            if committed is not None:
                committed(prior)
            # The writer counted the repeat in the transaction that found it.
            return await self._repeat(org.org_id, prior, request, counted=True)
        if committed is not None:
            committed(record.as_prior())
        return ExecuteResult(body, decision.outcome.value, repeated=False)

    def _signed_record(
        self,
        request: ExecuteRequest,
        decision: Decision,
        policy: PolicyRef,
        org_id: str,
        execution_id: str,
        now: datetime,
        evaluation_input: str,
    ) -> ExecutionRecord:
        """The decision's receipt, signed under a newly drawn receipt id, as the record to
        store with ``evaluation_input`` (what a replay evaluates again, as JSON)."""
        with tracing.step("sign"):
            signer = self.runtime.keyring.signer(now)
            unsigned = build_receipt(
                receipt_id=self.receipt_ids(now),
                execution_id=execution_id,
                request=request,
                decision=decision,
                policy=policy,
                org_id=org_id,
                issuer=self.runtime.settings.issuer,
                now=now,
                key_id=signer.key_id,
            )
            receipt, payload = sign_receipt(unsigned, signer)
        tracing.annotate(receipt_id=receipt["receipt_id"], execution_id=execution_id)
        return ExecutionRecord(
            execution_id=execution_id,
            receipt_id=receipt["receipt_id"],
            org_id=org_id,
            idempotency_key=request.idempotency_key,
            request_digest=receipt["request_digest"],
            surface=request.surface,
            actor=request.actor,
            decision=decision.outcome.value,
            policy_id=policy.policy_id,
            policy_version=policy.version,
            rule_id=decision.rule_id,
            reason=decision.reason,
            decided_at_ms=epoch_millis(now),
            evaluation_input=evaluation_input,
            receipt=msgspec.json.encode(receipt),
            leaf_hash=leaf_hash(payload),  # the sequencer's leaf, from the signed bytes
        )

    async def _stored_repeat(
        self,
        org_id: str,
        request: ExecuteRequest,
        committed: Callable[[PriorExecution], None] | None,
    ) -> ExecuteResult | None:
        """A repeat answered from the store, where no decision is made: its surface has no
        policy any more, or its quota is known to be used up. The keys asked for during
        one turn of the loop are read together (usecases/prior_lookups.py); ``committed``
        is told what the key stands for."""
        if request.idempotency_key is None:
            return None
        prior = await self.prior_lookups.prior(org_id, request.idempotency_key)
        if prior is None:
            return None
        if committed is not None:
            committed(prior)
        return await self._repeat(org_id, prior, request, counted=False)

    async def _repeat(
        self, org_id: str, prior: PriorExecution, request: ExecuteRequest, *, counted: bool
    ) -> ExecuteResult:
        if prior.request_digest != request.digest:
            raise IdempotencyConflict(
                "this idempotency key was already used for a different request"
            )
        if not counted:
            # Counted by the writer in its next batch (a count and the last time per
            # execution, not a row per repeat: bounded storage), and durable before the
            # answer leaves, like every other write.
            await self.runtime.writer.count_repeat(Repeat(org_id, prior.execution_id, self.clock()))
        if prior.decision == Outcome.ESCALATE.value:
            # The current state: the ESCALATE while pending, else its outcome receipt.
            approval = await self.approval(org_id, approval_id_for(prior.execution_id))
            if approval.outcome_receipt is not None:
                decision = "PERMIT" if approval.state == "approved" else "DENY"
                return ExecuteResult(approval.outcome_receipt, decision, repeated=True)
        return ExecuteResult(prior.receipt, prior.decision, repeated=True)

    async def approval(self, org_id: str, approval_id: str) -> Approval:
        """The approval as of now (an expired one settled first: docs/approvals.md)."""
        return await anyio.to_thread.run_sync(
            self.approvals.settle, org_id, approval_id, self.clock(), self.issue_outcome
        )

    def issue_outcome(
        self, escalation: dict[str, object], state: State, votes: list[Vote], now: datetime
    ) -> ExecutionRecord:
        """Sign the final receipt of an approval; the store inserts it with the state change."""
        now = truncate_to_millis(now)
        signer = self.runtime.keyring.signer(now)
        execution = self.runtime.executions.get(str(escalation["org_id"]),
                                                str(escalation["execution_id"]))  # fmt: skip
        if execution is None:
            raise InternalError("an approval's ESCALATE execution is gone")
        stored = msgspec.json.decode(execution.evaluation_input)
        terms = Terms.from_stored(stored["approval"], escalation)
        approvers = (
            [v.as_json() for v in votes if v.vote == "approve"] if state == "approved" else []
        )
        unsigned = build_outcome_receipt(
            escalation,
            receipt_id=self.receipt_ids(now),
            execution_id=new_execution_id(now),
            outcome=state,
            approvers=approvers,
            now=now,
            permit_ttl_seconds=terms.permit_ttl_seconds,
            key_id=signer.key_id,
        )
        receipt, payload = sign_receipt(unsigned, signer)
        return ExecutionRecord(
            execution_id=receipt["execution_id"],
            receipt_id=receipt["receipt_id"],
            org_id=execution.org_id,
            idempotency_key=None,  # the ESCALATE holds the key; a repeat finds this through it
            request_digest=receipt["request_digest"],
            surface=execution.surface,
            actor=execution.actor,
            decision=receipt["decision"],
            policy_id=execution.policy_id,
            policy_version=execution.policy_version,
            rule_id=execution.rule_id,
            reason=receipt.get("reasonCode"),
            decided_at_ms=epoch_millis(now),
            evaluation_input=execution.evaluation_input,
            receipt=msgspec.json.encode(receipt),
            leaf_hash=leaf_hash(payload),
        )
