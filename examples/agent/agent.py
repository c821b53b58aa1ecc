"""An AI agent whose tools run only under a verified PERMIT from execauth.

The model is a stand-in: ``PLAN`` is the list of tool calls an LLM might ask for. Each
tool is wrapped with execauth-client's ``@guarded``: a call first asks the service
(surface ``agent.tool.<name>``, the arguments as ``payload``) and runs only if the answer
is an authentic, unexpired PERMIT for exactly that call. A refusal goes back to the
model as the tool's result, so the agent can explain or try another way; the tool body
never runs. Policy: ``examples/policies/agent-tools.yaml``.

    EXECAUTH_URL=http://127.0.0.1:8080 EXECAUTH_API_KEY=service_live_… python agent.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from execauth_client import Client, ExecauthError, guarded

ACTOR = "agent:repo-helper"
Tool = Callable[..., str]

# What a model might ask for while "tidying up a repository".
PLAN: list[tuple[str, dict[str, Any]]] = [
    ("shell", {"argv": ["ls"]}),
    ("shell", {"argv": ["rm", "-rf", "build"]}),
    ("shell", {"argv": ["cat", "../.env"]}),
    ("write_file", {"path": "NOTES.md", "text": "cleaned up\n"}),
]


def build_tools(client: Client) -> dict[str, Tool]:
    """The agent's tools, each guarded by the service's policy for its surface."""

    @guarded(
        client,
        surface="agent.tool.shell",
        actor=ACTOR,
        payload_from=lambda argv: {"argv": argv},
    )
    def shell(argv: list[str]) -> str:
        """Run a program (no shell, so no expansion the policy did not see)."""
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)  # noqa: S603
        return done.stdout + done.stderr

    # Not allowed by the policy (its agent.tool.* block denies every unlisted tool):
    # a tool added to the agent stays unusable until someone allows it.
    @guarded(
        client,
        surface="agent.tool.write_file",
        actor=ACTOR,
        payload_from=lambda path, text: {"path": path, "bytes": len(text.encode())},
    )
    def write_file(path: str, text: str) -> str:
        Path(path).write_text(text)
        return f"wrote {path}"

    return {"shell": shell, "write_file": write_file}


def call_tool(tools: Mapping[str, Tool], name: str, arguments: Mapping[str, Any]) -> str:
    """One tool call; the model gets the tool's output, or why the tool did not run."""
    tool = tools.get(name)
    if tool is None:
        return f"error: there is no tool named {name!r}"
    try:
        return tool(**arguments)
    except ExecauthError as refused:  # DENY, SILENCE, a receipt that fails, service down
        return f"not run: {refused}"


def main() -> int:
    api_key = os.environ.get("EXECAUTH_API_KEY")
    if not api_key:
        print("set EXECAUTH_API_KEY (and EXECAUTH_URL)", file=sys.stderr)
        return 2
    url = os.environ.get("EXECAUTH_URL", "http://127.0.0.1:8080")
    with Client(url, api_key) as client:
        tools = build_tools(client)
        for name, arguments in PLAN:
            print(f"> {name}({arguments})")
            print(call_tool(tools, name, arguments).rstrip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
