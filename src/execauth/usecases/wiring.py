"""Every use case of one serving process, each built once, by ``build_use_cases``.

The app factory (``api.app.create_app``) calls it and hands each route builder the
use cases that builder needs, by name; no route module builds a use case of its own,
so each has one construction point and can be built without HTTP (as the tests do).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from execauth.serving.runtime import Runtime
from execauth.serving.shared_generation import SharedGeneration
from execauth.store.consumptions import ConsumptionStore
from execauth.store.subscriptions import SubscriptionStore
from execauth.usecases.approve import Approvals
from execauth.usecases.consume import ReceiptConsumption
from execauth.usecases.control_plane import ControlPlane
from execauth.usecases.execute import Clock, ExecutionService, utc_now
from execauth.usecases.export import BundleExport
from execauth.usecases.replay import ReplayService
from execauth.usecases.usage import UsageQueries


@dataclass(frozen=True, slots=True)
class UseCases:
    execute: ExecutionService  # authenticate, rate-limit, decide, sign, store
    control: ControlPlane  # organizations, API keys, policy publishing
    usage: UsageQueries  # usage and billing reports
    replay: ReplayService  # replays, draft impact, the console's "why"
    approvals: Approvals  # read, list and vote on ESCALATE approvals
    consumption: ReceiptConsumption  # use a PERMIT once
    export: BundleExport  # audit bundles
    # Decision-stream subscriptions: their handlers (api/subscription_routes.py) are
    # still the use case; the store is built here so that it is built once.
    subscriptions: SubscriptionStore
    clock: Clock  # the execute use case's clock, read at each call


def build_use_cases(
    runtime: Runtime,
    *,
    clock: Clock = utc_now,
    shared_generation: SharedGeneration | None = None,
) -> UseCases:
    execute = ExecutionService(runtime, clock=clock, shared_generation=shared_generation)

    def now() -> datetime:
        # Read through the service at each call, never captured: tests stop its clock.
        return execute.clock()

    return UseCases(
        execute=execute,
        control=ControlPlane(execute),
        usage=UsageQueries(execute),
        replay=ReplayService(execute),
        approvals=Approvals(execute),
        consumption=ReceiptConsumption(ConsumptionStore(runtime.engine), now),
        export=BundleExport(runtime, now),
        subscriptions=SubscriptionStore(runtime.engine),
        clock=now,
    )
