"""A real MCP server for the gateway's tests, written with the MCP SDK; run on stdio.

``python tools_server.py`` serves on stdio; ``python tools_server.py --http PORT``
serves streamable HTTP on 127.0.0.1:PORT/mcp. It appends every tool call it receives to
the JSON-lines file named by ``TOOLS_SERVER_CALLS`` before answering, so a test can show
a refused call never came.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("files")


def record(tool: str, arguments: dict[str, Any]) -> None:
    with Path(os.environ["TOOLS_SERVER_CALLS"]).open("a", encoding="utf-8") as calls:
        calls.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_file(path: str) -> str:
    """Read a file (pretend)."""
    record("read_file", {"path": path})
    return f"contents of {path}"


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
def transfer(amount: int, currency: str) -> str:
    """Send money (pretend)."""
    record("transfer", {"amount": amount, "currency": currency})
    return f"sent {amount} {currency}"


@server.tool()
def delete_everything(confirm: bool) -> str:
    """Unannotated, so destructive by MCP's defaults."""
    record("delete_everything", {"confirm": confirm})
    return "deleted"


@server.tool(name="Web.Search")
def web_search(query: str) -> str:
    """A name that is not a surface segment as it stands."""
    record("Web.Search", {"query": query})
    return f"results for {query}"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
