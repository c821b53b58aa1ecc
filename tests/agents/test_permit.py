"""``admit``: the one place a verified PERMIT becomes a tool call, and what it refuses."""

from __future__ import annotations

import pytest
from execauth_client import Receipt

from execauth.agents.permit import CallRefused, ToolCall, admit
from execauth.agents.runner import GatewaySettings, server_name
from execauth.agents.tool_map import ToolMap

pytestmark = pytest.mark.anyio

CALL = ToolCall("mcp.bank.transfer", "agent:payer", "transfer", {"amount": 40})


def receipt(**fields: str) -> Receipt:
    base = {
        "receipt_id": "service_rcpt_0123456789abcdef",
        "decision": "PERMIT",
        "surface": "mcp.bank.transfer",
        "actor": "agent:payer",
    }
    return Receipt.from_dict(base | fields)


async def test_a_permit_for_the_call_is_admitted() -> None:
    assert (await admit(receipt(), CALL)).receipt_id == "service_rcpt_0123456789abcdef"


@pytest.mark.parametrize("decision", ["DENY", "SILENCE", "ESCALATE"])
async def test_anything_but_a_permit_is_refused(decision: str) -> None:
    with pytest.raises(CallRefused) as refused:
        await admit(receipt(decision=decision), CALL)
    assert refused.value.code == decision


async def test_a_permit_for_another_surface_is_refused() -> None:
    with pytest.raises(CallRefused, match="RECEIPT_MISMATCH"):
        await admit(receipt(surface="mcp.bank.refund"), CALL)


async def test_a_permit_for_another_actor_is_refused() -> None:
    with pytest.raises(CallRefused, match="RECEIPT_MISMATCH"):
        await admit(receipt(actor="agent:other"), CALL)


def settings(**fields: object) -> GatewaySettings:
    base: dict[str, object] = {
        "command": ["/usr/bin/bank-server"], "actor": "agent:payer",
        "url": "http://127.0.0.1:8080", "api_key": "k", "tool_map": ToolMap(),
    }  # fmt: skip
    return GatewaySettings(**(base | fields))  # type: ignore[arg-type]


def test_the_server_flag_names_the_server_before_the_map_and_the_child() -> None:
    chosen = settings(server="flag", tool_map=ToolMap(server="map"))
    assert server_name(chosen, "reported") == "flag"


def test_the_map_names_the_server_before_the_child() -> None:
    assert server_name(settings(tool_map=ToolMap(server="map")), "reported") == "map"


def test_the_child_names_itself_before_its_command() -> None:
    assert server_name(settings(), "reported") == "reported"


def test_a_silent_child_is_named_after_its_command() -> None:
    assert server_name(settings(), None) == "bank-server"


def test_a_silent_remote_server_is_named_after_its_host() -> None:
    remote = settings(command=[], remote="https://mcp.example.com/mcp")
    assert server_name(remote, None) == "mcp.example.com"
