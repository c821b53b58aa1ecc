"""Agent frameworks' tool hooks, in front of execauth: the patterns, with plain functions.

Agent frameworks let you intervene before a tool runs in one of two ways, and execauth
fits both (see README.md for which framework offers which):

1. **Wrap the tool function** before registering it with the framework: the wrapper
   asks the service and raises before the body runs. ``@guarded`` from
   execauth-client is this wrapper; ``as_tool`` below adds the framework-neutral part,
   turning a refusal into the message the model reads instead of a crash.
2. **A hook the framework calls before any tool**, with the tool's name and input,
   that answers allow or deny: ``PreToolHook`` below.

Both go through ``ToolGate.check``: surface ``agent.tool.<name>``, the arguments as
``payload``, the agent's actor; only an authentic, unexpired PERMIT for exactly that
call allows it, and every error refuses it (fail closed).
Policy: ``examples/policies/agent-tools.yaml``.

    EXECAUTH_URL=http://127.0.0.1:8080 EXECAUTH_API_KEY=service_live_… python hooks.py
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from execauth_client import Client, ExecauthError, guarded

ACTOR = "agent:hooks-demo"
SURFACE_PREFIX = "agent.tool"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether one tool call may run; ``reason`` says why not, ``receipt_id`` is the proof."""

    allowed: bool
    reason: str
    receipt_id: str | None = None


class ToolGate:
    """Asks execauth about one tool call. Never raises: any failure is a refusal."""

    def __init__(self, client: Client, actor: str, prefix: str = SURFACE_PREFIX) -> None:
        self.client, self.actor, self.prefix = client, actor, prefix

    def check(self, tool: str, arguments: Mapping[str, Any]) -> Verdict:
        try:
            receipt = self.client.require_permit(
                f"{self.prefix}.{tool}", actor=self.actor, payload=dict(arguments)
            )
        except ExecauthError as refused:  # DENY, SILENCE, unverifiable, service down
            receipt = getattr(refused, "receipt", None)
            return Verdict(False, str(refused), receipt.receipt_id if receipt else None)
        return Verdict(True, "PERMIT", receipt.receipt_id)


# Pattern 1: wrap the function, then register the wrapper with the framework.


def as_tool(fn: Callable[..., str]) -> Callable[..., str]:
    """A guarded function as a tool: a refusal becomes the text the model reads.

    Frameworks that turn an exception into the model's observation (LangChain's
    ``handle_tool_error``, for one) can take the ``@guarded`` function as it is.
    """

    def tool(**arguments: Any) -> str:
        try:
            return fn(**arguments)
        except ExecauthError as refused:
            return f"not run: {refused}"

    tool.__name__, tool.__doc__ = fn.__name__, fn.__doc__
    return tool


def build_wrapped_tools(client: Client) -> dict[str, Callable[..., str]]:
    """Pattern 1: each tool guarded by execauth-client's ``@guarded``."""

    @guarded(client, surface=f"{SURFACE_PREFIX}.web_search", actor=ACTOR,
             payload_from=lambda query: {"query": query})  # fmt: skip
    def web_search(query: str) -> str:
        """Search the web (pretend)."""
        return f"3 results for {query!r}"

    @guarded(client, surface=f"{SURFACE_PREFIX}.send_email", actor=ACTOR,
             payload_from=lambda to, body: {"to": to, "bytes": len(body)})  # fmt: skip
    def send_email(to: str, body: str) -> str:
        """Send an email (pretend)."""
        SENT.append(to)
        return f"sent to {to}"

    return {"web_search": as_tool(web_search), "send_email": as_tool(send_email)}


# Pattern 2: one hook before every tool, answering allow or deny.


class PreToolHook:
    """A before-tool hook: ``(tool name, tool input) → allow or deny with a reason``.

    Shaped like the answer of a Claude Agent SDK ``PreToolUse`` hook
    (``permissionDecision``); an OpenAI Agents SDK tool input guardrail answers the same
    question with allow or reject-content. Map ``__call__``'s answer onto your framework's.
    """

    def __init__(self, gate: ToolGate) -> None:
        self.gate = gate

    def __call__(self, tool_name: str, tool_input: Mapping[str, Any]) -> dict[str, str]:
        verdict = self.gate.check(tool_name, tool_input)
        if verdict.allowed:
            return {"permissionDecision": "allow", "receipt_id": verdict.receipt_id or ""}
        return {"permissionDecision": "deny", "permissionDecisionReason": verdict.reason}


SENT: list[str] = []


def plain_tools() -> dict[str, Callable[..., str]]:
    """Tools as a framework holds them, unguarded: the hook is what guards them."""

    def web_search(query: str) -> str:
        return f"3 results for {query!r}"

    def send_email(to: str, body: str) -> str:
        SENT.append(to)
        return f"sent to {to}"

    return {"web_search": web_search, "send_email": send_email}


def run_with_hook(
    hook: PreToolHook, tools: Mapping[str, Callable[..., str]], name: str, arguments: dict[str, Any]
) -> str:
    """What a framework's runner does with a before-tool hook: ask, then run or refuse."""
    answer = hook(name, arguments)
    if answer["permissionDecision"] != "allow":
        return f"not run: {answer['permissionDecisionReason']}"
    return tools[name](**arguments)


# What a model might ask for: a short search (allowed), an email (no rule allows it).
PLAN: list[tuple[str, dict[str, Any]]] = [
    ("web_search", {"query": "execauth receipts"}),
    ("send_email", {"to": "all@example.com", "body": "hello"}),
]


def main() -> int:
    api_key = os.environ.get("EXECAUTH_API_KEY")
    if not api_key:
        print("set EXECAUTH_API_KEY (and EXECAUTH_URL)", file=sys.stderr)
        return 2
    url = os.environ.get("EXECAUTH_URL", "http://127.0.0.1:8080")
    with Client(url, api_key) as client:
        wrapped = build_wrapped_tools(client)
        hook, tools = PreToolHook(ToolGate(client, ACTOR)), plain_tools()
        for name, arguments in PLAN:
            print(f"wrapped> {name}({arguments})")
            print(wrapped[name](**arguments))
            print(f"hook> {name}({arguments})")
            print(run_with_hook(hook, tools, name, arguments))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
