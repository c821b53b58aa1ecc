"""Agents: the MCP gateway (``execauth mcp``) that puts execauth in front of an MCP server.

``tool_map`` names the surface each tool is decided on, ``permit`` is the one place a
verified PERMIT is admitted (and where bound grants and single use will be checked),
``gateway`` is the MCP server the agent talks to. See docs/agents.md.
"""
