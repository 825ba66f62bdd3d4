"""The one protocol every backend implements, and the call it receives.

A backend turns a canonical call into a canonical response or event stream; it never knows
about tenants, quotas or HTTP routes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from adapters.records import slot_init
from adapters.types import JSON, ChatRequest, ChatResponse, StreamEvent, WireFormat


@slot_init
@dataclass(frozen=True, slots=True)
class BackendCall:
    """What the pipeline hands a backend.

    `raw_body` is the client's own JSON after Lantern's deterministic edits, present when the
    client's wire format equals the backend's: the backend forwards it instead of re-encoding
    `request` (re-encoding would break signed blocks and cache keys).
    """

    request: ChatRequest
    client_wire: WireFormat
    raw_body: Mapping[str, JSON] | None = None
    timeout_s: float = 120.0
    extra_headers: Mapping[str, str] | None = None
    # the client's Responses API body (its stored conversation expanded into `input`), for a
    # backend that speaks the Responses API itself; None for the chat doors
    native_body: Mapping[str, JSON] | None = None
    # the client's `anthropic-beta` values; a backend forwards those its allow-list names
    betas: tuple[str, ...] = ()


@slot_init
@dataclass(frozen=True, slots=True)
class RelayedChunk:
    """Stream bytes for a client that speaks the backend's own wire format, already edited for
    it, and the canonical events they carry (for counting, never re-encoded)."""

    data: bytes
    events: tuple[StreamEvent, ...]
    # "responses": `data` is in the Responses API's format (a backend forwarding the Responses
    # door natively), not in the backend's chat format
    format: str = "backend"


class Backend(Protocol):
    name: str  # unique in the server config, e.g. "smollm2-local"
    kind: str  # openai_compatible | litellm | selfhost | bedrock
    wire: WireFormat | None  # the JSON dialect it speaks natively, if any

    async def complete(self, call: BackendCall) -> ChatResponse: ...

    def stream(self, call: BackendCall) -> AsyncIterator[StreamEvent]: ...

    async def aclose(self) -> None: ...


class RelayingBackend(Backend, Protocol):
    """A backend that can also forward its upstream's stream to a client of its own wire format
    (`call.raw_body` set), with only deterministic edits, instead of events to re-encode."""

    def relay(self, call: BackendCall) -> AsyncIterator[RelayedChunk]: ...


@dataclass(frozen=True, slots=True)
class EmbeddingReply:
    """An upstream's `/embeddings` answer: its JSON (vectors; passed on as it came) and the
    prompt tokens it reports (what the call is billed)."""

    body: Mapping[str, JSON]
    prompt_tokens: int


class EmbeddingBackend(Backend, Protocol):
    """A backend whose upstream also serves OpenAI's `/embeddings` (an OpenAI-compatible
    server; LiteLLM's `aembedding`; a Bedrock embedding model through InvokeModel). `headers`:
    sent with the upstream request (the call's `traceparent`, while tracing)."""

    async def embed(
        self, body: Mapping[str, JSON], timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> EmbeddingReply: ...


@dataclass(frozen=True, slots=True)
class HealthCheck:
    """Free GETs that say whether an upstream serves, tried in order (a 404 or 405 tries the
    next): no tokens generated, nothing billed."""

    urls: tuple[str, ...]
    headers: Mapping[str, str]


def free_health_check(backend: Backend) -> HealthCheck | None:
    """The backend's free check (`health_check`, where it has one); None: only a generation
    says it serves."""
    check = getattr(backend, "health_check", None)
    return check if isinstance(check, HealthCheck) else None


def check_embedding(backend: Backend, body: Mapping[str, JSON]) -> None:
    """The backend's own check of an embeddings body (`check_embedding`, where it has one: a
    `WireFormatError` naming a field it cannot honour), run before anything is reserved."""
    check = getattr(backend, "check_embedding", None)
    if check is not None:
        check(body)


def serves_embeddings(backend: Backend) -> bool:
    """Whether `backend` embeds: it has `embed` and has not said `embeds = False` (a server
    kind with no `/embeddings`, such as the bundled engine)."""
    return callable(getattr(backend, "embed", None)) and bool(getattr(backend, "embeds", True))
