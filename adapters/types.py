"""Canonical request/response types shared by every wire format and backend.

Owns the data that crosses package seams; holds no behaviour beyond small derived values.
JSON values appear only where the wire carries free-form JSON (tool schemas, extra fields).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from adapters.records import slot_init

Role = Literal["system", "user", "assistant", "tool"]
StopReason = Literal["stop", "length", "tool_use", "stop_sequence", "error"]
WireFormat = Literal["openai", "anthropic"]
JSON = Any  # only at the JSON edge: tool schemas, tool arguments, passthrough fields


@slot_init
@dataclass(frozen=True, slots=True)
class CacheControl:
    """A provider cache breakpoint on a block (Anthropic `cache_control`, Bedrock `cachePoint`)."""

    ttl: Literal["5m", "1h"] = "5m"


@slot_init
@dataclass(frozen=True, slots=True)
class Citation:
    """A web page the model cited for a span of a reply's text part: Anthropic's
    `web_search_result_location`, OpenAI's `url_citation`. `start_index`/`end_index` index the
    part's text in characters; None: the whole part (Anthropic cites whole text blocks).
    `encrypted_index` is Anthropic's opaque pointer into its search results, which its own
    shape requires (nothing else can make one)."""

    url: str
    title: str
    start_index: int | None = None
    end_index: int | None = None
    cited_text: str = ""
    encrypted_index: str | None = None


@slot_init
@dataclass(frozen=True, slots=True)
class TextPart:
    text: str
    cache_control: CacheControl | None = None
    citations: tuple[Citation, ...] = ()  # in replies only: the sources of this text


@slot_init
@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image by URL or base64 data; counted and hashed by its bytes, never decoded."""

    url: str | None = None
    media_type: str | None = None
    data_b64: str | None = None
    cache_control: CacheControl | None = None


@slot_init
@dataclass(frozen=True, slots=True)
class ToolUsePart:
    """The model asks for a tool: OpenAI `tool_calls[i]`, Anthropic `tool_use` block."""

    id: str
    name: str
    arguments_json: str  # the exact JSON text the model produced
    cache_control: CacheControl | None = None


@slot_init
@dataclass(frozen=True, slots=True)
class ToolResultPart:
    """A tool's answer: OpenAI `role: tool` message, Anthropic `tool_result` block."""

    tool_use_id: str
    content: tuple[TextPart | ImagePart, ...]
    is_error: bool = False
    cache_control: CacheControl | None = None


@slot_init
@dataclass(frozen=True, slots=True)
class ThinkingPart:
    """Extended thinking, kept verbatim: the provider checks `signature` (or the opaque
    `redacted_data` of a redacted block) when the block comes back on the next turn."""

    thinking: str = ""
    signature: str = ""
    redacted_data: str | None = None  # set: an Anthropic `redacted_thinking` block
    cache_control: CacheControl | None = None


ContentPart = TextPart | ImagePart | ToolUsePart | ToolResultPart | ThinkingPart
ReplyPart = TextPart | ToolUsePart | ThinkingPart


@slot_init
@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: tuple[ContentPart, ...]
    name: str | None = None


@slot_init
@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    input_schema: Mapping[str, JSON]
    cache_control: CacheControl | None = None


@slot_init
@dataclass(frozen=True, slots=True)
class PublicHead:
    """The leading part of a prompt an admin declared public: its first `tools` tools and, when
    every tool is public, its first `system` system text blocks (canonical order)."""

    tools: int = 0
    system: int = 0


@slot_init
@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One chat call in canonical form. `system` is separate from `messages` (Anthropic order)."""

    model: str
    messages: tuple[Message, ...]
    system: tuple[TextPart, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: JSON = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    session_id: str | None = None
    prompt_cache_key: str | None = None
    cache_salt: str | None = None
    cache_public: PublicHead | None = None  # what the bundled engine may share across tenants
    user: str | None = None
    extra: Mapping[str, JSON] = field(default_factory=dict)


@slot_init
@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts by kind. `input_tokens` excludes cache reads and writes (Anthropic meaning)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # of `cache_write_tokens`, those written with a 1 h TTL (priced at the 1 h write rate)
    cache_write_1h_tokens: int = 0
    # of `output_tokens`, those the model spent reasoning, where the provider counts them apart
    # (OpenAI `reasoning_tokens`; Anthropic and Bedrock report none: thinking is output)
    reasoning_tokens: int = 0
    # audio among the prompt's and the output's tokens (OpenAI `audio_tokens`)
    audio_input_tokens: int = 0
    audio_output_tokens: int = 0
    # server-side web searches the provider ran and bills per search, not per token
    # (Anthropic `server_tool_use.web_search_requests`)
    web_search_requests: int = 0

    @property
    def prompt_tokens(self) -> int:
        """All prompt tokens, cached or not (OpenAI `prompt_tokens`)."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.cache_write_1h_tokens + other.cache_write_1h_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.audio_input_tokens + other.audio_input_tokens,
            self.audio_output_tokens + other.audio_output_tokens,
            self.web_search_requests + other.web_search_requests,
        )


@slot_init
@dataclass(frozen=True, slots=True)
class Choice:
    """One further answer to the same prompt (OpenAI `n` > 1)."""

    content: tuple[ReplyPart, ...]
    stop_reason: StopReason


@slot_init
@dataclass(frozen=True, slots=True)
class WireReply:
    """An upstream's reply body as it sent it, in its own chat wire: what a client of that
    wire gets (only `model` edited), every field and block kept, modelled or not."""

    wire: WireFormat
    body: Mapping[str, JSON]


@slot_init
@dataclass(frozen=True, slots=True)
class ChatResponse:
    id: str
    model: str
    content: tuple[ReplyPart, ...]
    stop_reason: StopReason
    usage: Usage
    stop_sequence: str | None = None
    # the backend's own reply object, when it answered a Responses API call natively
    native: Mapping[str, JSON] | None = None
    more_choices: tuple[Choice, ...] = ()  # choices 1..n-1 (OpenAI `n` > 1)
    # reply fields of the upstream's own wire that the canonical model does not hold
    # (OpenAI `system_fingerprint`, `service_tier`, each choice's `logprobs`); echoed only to
    # a client of that wire
    wire_extra: Mapping[str, JSON] = field(default_factory=dict)
    # set by a backend of a chat wire: relayed, not encoded, to a client of that wire; not
    # part of the canonical reply (two backends' equal answers compare equal)
    upstream: WireReply | None = field(default=None, compare=False)


# --- streaming events, in the order a backend yields them ---------------------------------


@slot_init
@dataclass(frozen=True, slots=True)
class StreamStart:
    id: str
    model: str
    usage: Usage | None = None  # the provider's own start usage (cache reads included), if told


@slot_init
@dataclass(frozen=True, slots=True)
class TextDelta:
    index: int  # content block index
    text: str


@slot_init
@dataclass(frozen=True, slots=True)
class ToolCallStart:
    index: int
    id: str
    name: str


@slot_init
@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    index: int
    arguments_json: str


@slot_init
@dataclass(frozen=True, slots=True)
class ThinkingStart:
    """A thinking block opens (`redacted_data` set: a redacted block, complete as it starts)."""

    index: int
    redacted_data: str | None = None


@slot_init
@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    index: int
    thinking: str = ""
    signature: str = ""  # an Anthropic `signature_delta` (or Bedrock reasoning signature)


@slot_init
@dataclass(frozen=True, slots=True)
class TextCitation:
    """A citation for the text block `index` (Anthropic's `citations_delta`): whole-block
    citations (no indices) cover the block's text once it is complete."""

    index: int
    citation: Citation


@slot_init
@dataclass(frozen=True, slots=True)
class StreamEnd:
    stop_reason: StopReason
    usage: Usage
    stop_sequence: str | None = None


StreamEvent = (
    StreamStart
    | TextDelta
    | ToolCallStart
    | ToolCallDelta
    | ThinkingStart
    | ThinkingDelta
    | TextCitation
    | StreamEnd
)
