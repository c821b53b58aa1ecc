"""Surfaces for MCP tools, the mapping file, and which tools ``tools/list`` hides."""

from __future__ import annotations

from pathlib import Path

import pytest

from execauth.agents.listing import always_denied_by_files
from execauth.agents.tool_map import ToolMap, ToolMapInvalid, load_tool_map


def test_a_tool_is_decided_on_mcp_server_tool_by_default() -> None:
    assert ToolMap().surface_for("files", "read_file") == "mcp.files.read_file"


def test_a_tool_name_that_is_no_surface_segment_is_lowercased_and_underscored() -> None:
    assert ToolMap().surface_for("My Server", "Web.Search") == "mcp.my_server.web_search"


def test_the_mapping_file_names_surfaces_actor_and_server(tmp_path: Path) -> None:
    path = tmp_path / "map.yaml"
    path.write_text("server: bank\nactor: agent:payer\ntools:\n  send: payments.transfer\n")
    mapping = load_tool_map(path)
    assert (mapping.server, mapping.actor) == ("bank", "agent:payer")
    assert mapping.surface_for("bank", "send") == "payments.transfer"
    assert mapping.surface_for("bank", "balance") == "mcp.bank.balance"


def test_a_mapping_to_something_that_is_not_a_surface_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "map.yaml"
    path.write_text("tools:\n  send: Payments Transfer\n")
    with pytest.raises(ToolMapInvalid, match=r"tools\.send"):
        load_tool_map(path)


def test_an_unknown_field_in_the_mapping_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "map.yaml"
    path.write_text("tool: {}\n")
    with pytest.raises(ToolMapInvalid, match="unknown field"):
        load_tool_map(path)


POLICY = """\
surfaces:
  - match: mcp.files.*
    rules:
      - id: nothing-by-default
        deny: "true"
        reason: SERVICE_POLICY_TOOL_NOT_ALLOWED
  - match: mcp.files.read_file
    rules:
      - id: reads
        permit: "true"
"""


def test_a_surface_whose_block_has_no_permit_rule_is_always_denied(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(POLICY)
    assert always_denied_by_files(tmp_path / "p.yaml")("mcp.files.delete")


def test_a_surface_with_a_permit_rule_is_not_hidden(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(POLICY)
    assert not always_denied_by_files(tmp_path / "p.yaml")("mcp.files.read_file")


def test_a_surface_the_local_policy_does_not_govern_is_not_hidden(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(POLICY)
    assert not always_denied_by_files(tmp_path / "p.yaml")("mcp.mail.send")


def test_a_surface_with_an_escalate_rule_is_not_hidden(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        "surfaces:\n  - match: mcp.files.delete\n    rules:\n"
        "      - {id: ask, escalate: 'true', approvers: {roles: [admin]}}\n"
    )
    assert not always_denied_by_files(tmp_path / "p.yaml")("mcp.files.delete")
