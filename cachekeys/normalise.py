"""The normalisation switches and their application to a canonical request.

Pure: takes a request and options, returns a new request. Each switch is a tenant policy
choice; the gateway maps its policy section onto `NormaliseOptions` (cachekeys never reads
policies). History is only touched by the opt-in `canonical_tool_args` (key order only).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from adapters.types import ChatRequest
from cachekeys.canonical import (
    IsPublicTool,
    SchemaMemo,
    canonical_history_arguments,
    canonical_tool_schemas,
    order_tools,
)
from cachekeys.volatile import VolatileMatcher, relocate_request


@dataclass(frozen=True, slots=True)
class PublicPrefix:
    """What an admin declared shareable across tenants: tools by name or digest, system by digest."""

    tool_names: frozenset[str] = frozenset()
    tool_sha256: frozenset[str] = frozenset()  # hex of `canonical.tool_digest`
    system_sha256: frozenset[str] = frozenset()  # hex SHA-256 of one system text block (UTF-8)

    def is_public_tool(self, name: str, digest: bytes) -> bool:
        return name in self.tool_names or digest.hex() in self.tool_sha256

    @property
    def has_tools(self) -> bool:
        """Whether any tool is declared public (else no tool digest needs computing)."""
        return bool(self.tool_names or self.tool_sha256)

    def is_public_system(self, digest_hex: str) -> bool:
        return digest_hex in self.system_sha256


@dataclass(frozen=True, slots=True)
class NormaliseOptions:
    order_tools: bool = True
    canonical_json: bool = True
    canonical_tool_args: bool = False
    relocate_volatile: bool = False
    volatile: VolatileMatcher = field(default_factory=VolatileMatcher.build)
    public: PublicPrefix = PublicPrefix()
    schemas: SchemaMemo | None = None  # canonical schemas memoised (same result, less CPU)

    @property
    def is_public_tool(self) -> IsPublicTool | None:
        """None when no tool is declared public: ordering then needs no tool digests."""
        return self.public.is_public_tool if self.public.has_tools else None


def normalise_request(request: ChatRequest, options: NormaliseOptions) -> ChatRequest:
    """Apply the enabled switches in a fixed order: schemas, tool order, history args, relocation."""
    out = request
    tools = request.tools
    if options.canonical_json and tools:
        tools = canonical_tool_schemas(tools, options.schemas)
    if options.order_tools and tools:
        tools = order_tools(tools, options.is_public_tool)
    if tools is not request.tools:  # one copy of the request for both tool edits
        out = replace(out, tools=tools)
    if options.canonical_tool_args:
        out = canonical_history_arguments(out)
    if options.relocate_volatile:
        out = relocate_request(out, options.volatile)
    return out
