"""The MCP server an agent talks to, in front of the MCP server that does the work.

Every ``tools/call`` is first an execute on the service: the tool's surface
(``tool_map``), the agent's actor, the call's arguments as ``payload`` and what the tool
says about itself (its name, its server, its ``readOnlyHint`` and ``destructiveHint``)
as ``context``. The call reaches the upstream server only under a PERMIT that
``execauth_client`` verified offline and ``permit.admit`` accepted; the receipt id goes
into the result's ``_meta``. An ESCALATE waits for its approval (``approval_wait``),
with progress notifications. Anything else — DENY, SILENCE, an ESCALATE not approved in
time, an error, a receipt that does not verify — is a tool error naming the reason
code, and the upstream server is never called (docs/agents.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from execauth_client import (
    AsyncClient,
    ExecauthError,
    KeyList,
    NotPermitted,
    Receipt,
    require_permit,
)
from mcp import Client as UpstreamClient
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from execauth.agents.permit import CallRefused, Consume, ToolCall, admit
from execauth.agents.tool_map import ToolMap
from execauth.errors import InvalidRequest
from execauth.request import parse_execute_request

RECEIPT_ID_META = "execauth/receipt_id"
DECISION_META = "execauth/decision"
# A call the policy escalates waits for its approval (``approval_wait``), else is refused.
ESCALATE = "ESCALATE"

Admit = Callable[[Receipt, ToolCall, Consume], Awaitable[Receipt]]


def tool_context(server: str, tool: types.Tool | None, name: str) -> dict[str, Any]:
    """What the policy sees in ``context`` about the tool being called.

    MCP's defaults apply when the server says nothing: a tool is not read-only and is
    destructive unless it says otherwise, so a policy that escalates or denies
    destructive tools also covers a server that does not annotate them. An unknown tool
    (not in the server's listing) is treated the same way.
    """
    hints = tool.annotations if tool is not None else None
    read_only = bool(hints and hints.read_only_hint)
    destructive = not read_only and (
        hints is None or hints.destructive_hint is None or hints.destructive_hint
    )
    return {
        "server": server,
        "tool": name,
        "readOnlyHint": read_only,
        "destructiveHint": destructive,
    }


def refusal(code: str, message: str, receipt: Receipt | None = None) -> types.CallToolResult:
    """A tool error the agent can read: the tool was not called, and why."""
    meta: dict[str, Any] = {DECISION_META: receipt.decision if receipt else "ERROR"}
    if receipt is not None:
        meta[RECEIPT_ID_META] = receipt.receipt_id
    text = f"execauth refused this call ({code}): {message}. The tool was not called."
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True, _meta=meta)


@dataclass(slots=True)
class Gateway:
    """One agent connection's gateway: the upstream MCP client, the execauth client, and how
    tools map to surfaces. ``hidden`` names the tools ``tools/list`` leaves out."""

    upstream: UpstreamClient
    execauth: AsyncClient
    server: str
    actor: str
    tool_map: ToolMap
    hidden: Callable[[str], bool] = lambda surface: False
    admit: Admit = admit
    keys: KeyList | None = None  # a pinned key list; None: the service's, fetched and cached
    # Seconds a call the policy escalates may wait for its approval; 0: refused at once.
    approval_wait: float = 0.0
    progress_every: float = 5.0  # seconds between progress notifications while waiting
    _tools: dict[str, types.Tool] = field(default_factory=dict, init=False)

    async def upstream_tools(self) -> list[types.Tool]:
        """Every tool the upstream server lists (all pages); remembered for their hints."""
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            page = await self.upstream.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        self._tools = {tool.name: tool for tool in tools}
        return tools

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """The upstream tools, without those whose surface ``hidden`` says is always denied."""
        tools = await self.upstream_tools()
        shown = [
            t for t in tools if not self.hidden(self.tool_map.surface_for(self.server, t.name))
        ]
        return types.ListToolsResult(tools=shown)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """Decide, then call upstream only under an admitted PERMIT."""
        arguments = dict(params.arguments or {})
        if params.name not in self._tools:
            await self.upstream_tools()  # a tool listed after our last look, or none
        call = ToolCall(
            self.tool_map.surface_for(self.server, params.name), self.actor, params.name, arguments
        )
        try:
            receipt = await self.decide_with_progress(ctx, call)
        except CallRefused as refused:
            return refusal(refused.code, refused.message, refused.receipt)
        result = await self.upstream.call_tool(params.name, arguments)
        meta = dict(result.meta or {}) | {
            RECEIPT_ID_META: receipt.receipt_id,
            DECISION_META: receipt.decision,
        }
        return result.model_copy(update={"meta": meta})

    async def decide_with_progress(self, ctx: ServerRequestContext[Any], call: ToolCall) -> Receipt:
        """``decide``, telling the agent every ``progress_every`` seconds while it takes long
        (an approval pending): its client then knows the call is alive and waiting, not
        lost. ``report_progress`` sends nothing when the agent asked for no progress."""
        if self.approval_wait <= 0:
            return await self.decide(call)

        async def tick() -> None:
            waited = 0.0
            while True:
                await anyio.sleep(self.progress_every)
                waited += self.progress_every
                await ctx.session.report_progress(
                    waited, self.approval_wait,
                    f"waiting for execauth's decision (an approval may be pending), {waited:.0f}s",
                )  # fmt: skip

        # The outcome is kept out of the task group, which would wrap a refusal in a group.
        outcome: Receipt | CallRefused
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(tick)
            try:
                outcome = await self.decide(call)
            except CallRefused as refused:
                outcome = refused
            finally:
                tasks.cancel_scope.cancel()
        if isinstance(outcome, CallRefused):
            raise outcome
        return outcome

    async def decide(self, call: ToolCall) -> Receipt:
        """The admitted PERMIT for ``call``, or ``CallRefused``: never a PERMIT by default."""
        context = tool_context(self.server, self._tools.get(call.tool), call.tool)
        try:
            receipt = await self.permitted(call, context)
        except NotPermitted as refused:
            decided = refused.receipt
            if decided.decision == ESCALATE:
                waited = (
                    f"which did not come within {self.approval_wait:g}s"
                    if self.approval_wait > 0
                    else "and this gateway does not wait for approvals"
                )
                raise CallRefused(
                    ESCALATE,
                    f"the policy asks for a person's approval, {waited} "
                    f"(approval {decided.approval_id or 'unknown'})",
                    decided,
                ) from refused
            code = decided.policy_reason or decided.reason_code or decided.decision
            raise CallRefused(
                code, f"{decided.decision}: {decided.message or 'no message'}", decided
            ) from refused
        except ExecauthError as failed:  # unreachable, 4xx/5xx, a receipt that does not verify
            raise CallRefused(failed.code or "EXECAUTH_ERROR", str(failed)) from failed
        except InvalidRequest as invalid:  # what the service would refuse too
            raise CallRefused(invalid.code, str(invalid)) from invalid
        return await self.admit(receipt, call, self.consume)

    async def consume(self, receipt: Receipt, actor: str) -> None:
        """Use a single-use PERMIT up on the service (``admit`` calls it before the tool)."""
        await self.execauth.consume(receipt, actor=actor)

    async def permitted(self, call: ToolCall, context: dict[str, Any]) -> Receipt:
        """Ask, then verify: against the pinned ``keys`` when given (no refetch, as ``execauth
        gate --keys``), else against the service's own key list. Raises unless PERMIT."""
        wait = self.approval_wait or None
        if self.keys is None:
            # A single-use PERMIT is consumed by admit, after the grant check, not here.
            return await self.execauth.require_permit(
                call.surface, actor=call.actor, context=context, payload=call.arguments,
                wait_for_approval=wait, defer_consumption=True,
            )  # fmt: skip
        receipt = await self.execauth.authorize(
            call.surface, actor=call.actor, context=context, payload=call.arguments,
            wait_for_approval=wait,
        )  # fmt: skip
        # The digest to expect is the one the service computes: the same function.
        body = {"surface": call.surface, "actor": call.actor, "context": context,
                "payload": dict(call.arguments)}  # fmt: skip
        expected = parse_execute_request(body, None).digest
        return require_permit(
            receipt, keys=self.keys, surface=call.surface, actor=call.actor,
            request_digest=expected, defer_consumption=True,
        )  # fmt: skip

    def mcp_server(self, name: str = "execauth-mcp-gateway") -> Server[Any]:
        """The agent-facing MCP server (low-level SDK server: the tools are the upstream's)."""
        return Server(name, on_list_tools=self.list_tools, on_call_tool=self.call_tool)
