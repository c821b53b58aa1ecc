"""Which surface each MCP tool is decided on, and which tools ``tools/list`` hides.

A tool's surface is ``mcp.<server>.<tool>`` unless the mapping file names another. MCP
tool names allow characters a surface does not (``[a-z0-9_-]`` segments), so the
default lowercases the name and replaces the rest with ``_``; the exact tool name also
goes into the request's ``context.tool``, so a policy can still tell two tools apart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from execauth.request import is_valid_surface

_NOT_SURFACE_CHARS = re.compile(r"[^a-z0-9_-]+")
_MAP_FIELDS = {"server", "actor", "tools"}


class ToolMapInvalid(ValueError):
    """The mapping file cannot be used; the message names the file and the problem."""


def surface_segment(name: str) -> str:
    """``name`` as one surface segment: lowercase, other characters as ``_``."""
    segment = _NOT_SURFACE_CHARS.sub("_", name.lower()).strip("_")
    return segment or "_"


@dataclass(frozen=True, slots=True)
class ToolMap:
    """Surfaces for one MCP server's tools: explicit ones from the file, else the default."""

    server: str | None = None
    actor: str | None = None
    surfaces: Mapping[str, str] = field(default_factory=dict)

    def surface_for(self, server: str, tool: str) -> str:
        """The surface ``tool`` is decided on when the server is called ``server``."""
        explicit = self.surfaces.get(tool)
        if explicit is not None:
            return explicit
        return f"mcp.{surface_segment(server)}.{surface_segment(tool)}"


def load_tool_map(path: Path) -> ToolMap:
    """Read a mapping file (YAML or JSON); ``ToolMapInvalid`` names what is wrong."""
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ToolMapInvalid(f"{path}: cannot read the mapping file: {exc}") from exc
    return parse_tool_map(data if data is not None else {}, str(path))


def parse_tool_map(data: object, source: str) -> ToolMap:
    """A ``ToolMap`` from the file's data: ``{server?, actor?, tools?: {tool: surface}}``."""
    if not isinstance(data, Mapping):
        raise ToolMapInvalid(f"{source}: the mapping file must be an object")
    unknown = sorted(set(data) - _MAP_FIELDS)
    if unknown:
        raise ToolMapInvalid(f"{source}: unknown field(s) {', '.join(map(str, unknown))}")
    server, actor, tools = data.get("server"), data.get("actor"), data.get("tools", {})
    for name, value in (("server", server), ("actor", actor)):
        if value is not None and (not isinstance(value, str) or not value):
            raise ToolMapInvalid(f"{source}: '{name}' must be a non-empty string")
    if not isinstance(tools, Mapping):
        raise ToolMapInvalid(f"{source}: 'tools' must map tool names to surfaces")
    surfaces: dict[str, str] = {}
    for tool, surface in tools.items():
        if not isinstance(tool, str) or not is_valid_surface(surface):
            raise ToolMapInvalid(
                f"{source}: tools.{tool}: {surface!r} is not a surface "
                "(dotted lowercase segments of [a-z0-9_-])"
            )
        surfaces[tool] = surface
    return ToolMap(server=server, actor=actor, surfaces=surfaces)
