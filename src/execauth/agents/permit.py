"""The one place a tool call is admitted under a PERMIT.

``execauth_client``'s ``require_permit`` has already verified the receipt offline
(authentic, unexpired, a PERMIT for exactly this surface, actor and request digest).
``admit`` is where a receipt becomes permission to call one tool: it checks again what
this call depends on, then the PERMIT's bound grant (its ``constraints``) against the
call's arguments, then single use (consume before acting) (docs/agents.md, "Bound grants").
Anything it cannot confirm is a ``CallRefused``: the tool is not called.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from execauth_client import ExecauthError, Receipt, ReceiptNotUsable
from execauth_client.intent import Intent, check_constraints


@dataclass(frozen=True, slots=True)
class ToolCall:
    """What the gateway is about to do: call ``tool`` with ``arguments``, decided on ``surface``."""

    surface: str
    actor: str
    tool: str
    arguments: Mapping[str, Any]


class CallRefused(Exception):
    """The tool must not be called; ``code`` is the reason code the agent sees."""

    def __init__(self, code: str, message: str, receipt: Receipt | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.receipt = receipt


def call_intent(call: ToolCall) -> Intent:
    """The call as an intent: every argument for ``allowed_tool_args``, and the arguments
    named ``amount``, ``currency``, ``command`` (an argv list) and ``resources`` (a list of
    strings) for the constraints of those names. An argument of another shape states no
    value, so a constraint that needs it refuses the call (docs/agents.md)."""
    args = call.arguments
    amount = args.get("amount")
    currency = args.get("currency")
    command = args.get("command")
    resources = args.get("resources")
    return Intent(
        surface=call.surface,
        actor=call.actor,
        amount=amount if isinstance(amount, int | float) and not isinstance(amount, bool) else None,
        currency=currency if isinstance(currency, str) else None,
        command=command if _strings(command) else None,
        resources=resources if _strings(resources) else None,
        tool_args=args,
    )


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


# Uses a single-use PERMIT once on the service for the call's actor (``AsyncClient.consume``).
Consume = Callable[[Receipt, str], Awaitable[object]]


async def admit(receipt: Receipt, call: ToolCall, consume: Consume | None = None) -> Receipt:
    """``receipt`` if it lets ``call`` go ahead; else raise ``CallRefused``."""
    if receipt.decision != "PERMIT":
        raise CallRefused(receipt.decision, "the receipt is not a PERMIT", receipt)
    if receipt.surface != call.surface or receipt.actor != call.actor:
        raise CallRefused(
            "RECEIPT_MISMATCH",
            f"the PERMIT is for {receipt.surface!r} by {receipt.actor!r}, "
            f"not {call.surface!r} by {call.actor!r}",
            receipt,
        )
    # The bound grant: an argument beyond a constraint, or a constraint the gateway
    # cannot check (an x_ one), refuses the call before anything is consumed or called.
    grant = check_constraints(receipt, call_intent(call))
    if not grant.ok:
        raise CallRefused(grant.reason or "constraint_unverifiable", grant.detail, receipt)
    # Single use (receipt.single_use): consumed here, after the grant is checked and
    # before the tool is called, so a refused call never uses the PERMIT up.
    if receipt.single_use:
        await _consume_once(receipt, call, consume)
    return receipt


async def _consume_once(receipt: Receipt, call: ToolCall, consume: Consume | None) -> None:
    """Only the first consumer of a single-use PERMIT, on any instance, calls the tool."""
    if consume is None:
        raise CallRefused("SINGLE_USE_UNCONSUMED", "a single-use PERMIT and no way to use it "
                          "up before the call", receipt)  # fmt: skip
    try:
        await consume(receipt, call.actor)
    except ReceiptNotUsable as refused:  # 409: used already (by whom, when), expired; 404
        raise CallRefused(refused.code or "receipt_not_usable", refused.message,
                          receipt) from refused  # fmt: skip
    except ExecauthError as failed:  # unreachable, 5xx: not known to be ours, so refused
        raise CallRefused(failed.code or "EXECAUTH_ERROR",
                          f"the single-use PERMIT could not be consumed: {failed}",
                          receipt) from failed  # fmt: skip
