"""The `mcp_servers:` section of a tenant policy: which upstream MCP servers (declared by the
operator in lantern.yaml) the tenant may use, and which of their tools.

Pure data; the gateway's MCP door (gateway/mcp/) applies it when it lists and calls tools.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from policies.base import PolicyModel

SERVER_NAME = r"^[a-z0-9][a-z0-9-]{0,31}$"  # no '_': a served name splits at its first '__'


class McpServerGrant(PolicyModel):
    """`orders` or `{name: orders, allow: [...], deny: [...]}`: every tool of the server, or
    those in `allow` (all when empty) that are not in `deny`; names as the server gives them."""

    name: str = Field(pattern=SERVER_NAME)
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    def permits(self, tool: str) -> bool:
        return (not self.allow or tool in self.allow) and tool not in self.deny
