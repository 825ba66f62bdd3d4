"""`/mcp`: the MCP Streamable HTTP door in front of the tenants' sandboxed tools and of the
upstream MCP servers the operator declares (docs/mcp.md). Built on the `mcp` SDK's server."""
