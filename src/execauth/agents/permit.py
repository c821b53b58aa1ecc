"""The one place a tool call is admitted under a PERMIT.

``execauth_client``'s ``require_permit`` has already verified the receipt offline
(authentic, unexpired, a PERMIT for exactly this surface, actor and request digest).
``admit`` is where a receipt becomes permission to call one tool: it checks again what
this call depends on, and it is where bound grants (a PERMIT's ``constraints``) and
single use (consume before acting) are enforced as they arrive (docs/agents.md).
Anything it cannot confirm is a ``CallRefused``: the tool is not called.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from execauth_client import Receipt


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


async def admit(receipt: Receipt, call: ToolCall) -> Receipt:
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
    return receipt
