"""What the request pipeline needs from the parts below it, as protocols.

The pipeline is written against these; `gateway/wiring/` fits the real parts to them and the
tests fit fakes. Keeping them here keeps `pipeline.py` free of construction details.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

from adapters.backend import Backend
from adapters.records import slot_init
from adapters.types import JSON, ChatRequest, Message, Usage, WireFormat
from policies.model import TenantPolicy

Venue = Literal["selfhost", "api"]
# whose fault an attempt that did not end well was: only "backend" (connect refused or reset,
# timeout, 5xx) says anything about the backend's health; "request" is a 4xx the request caused,
# "gateway" an error on our side, "client" a client that went away
Fault = Literal["backend", "request", "gateway", "client"]


@dataclass(frozen=True, slots=True)
class ServerAddress:
    """Where an upstream listens, as its spans name it (`server.address`, `server.port`)."""

    address: str
    port: int


@dataclass(frozen=True, slots=True)
class Candidate:
    """One place a model can be served: a backend (one replica of it, for self-hosted ones)."""

    backend: Backend
    backend_name: str  # the name in lantern.yaml
    venue: Venue
    replica: str | None = None  # replica base URL for self-hosted fleets
    server: ServerAddress | None = None  # None: the SDK picks it (LiteLLM, Bedrock by default)


@dataclass(frozen=True, slots=True)
class ModelRoute:
    name: str  # the model name clients send
    candidates: tuple[Candidate, ...]


class TokenCounting(Protocol):
    """`scope`: the tenant counted for; a count never reads another tenant's memo entries (a
    hit is faster: its latency would tell that someone sent that text)."""

    def count_prompt(self, request: ChatRequest, scope: str) -> int: ...

    def count_text(self, model: str, text: str, scope: str) -> int: ...


class Pricing(Protocol):
    def cost_usd(self, model: str, usage: Usage) -> float: ...

    def uncached_cost_usd(self, model: str, usage: Usage) -> float: ...

    def worst_case_usd(
        self, model: str, prompt_tokens: int, max_output_tokens: int, write_ttl: str
    ) -> float:
        """An upper bound of the call's cost: the dollar hold (cache-write premium included)."""
        ...


# An admitted reservation: opaque to the pipeline, read only by the admission that issued it.
Ticket = Any


class AdmissionPort(Protocol):
    async def reserve(
        self,
        tenant: TenantPolicy,
        *,
        session_id: str | None,
        prompt_tokens: int,
        max_output_tokens: int,
        worst_case_usd: float,
    ) -> Ticket: ...

    async def settle(self, ticket: Ticket, *, usage: Usage, cost_usd: float) -> None: ...

    def rate_headers(self, ticket: Ticket) -> dict[str, str]: ...


@slot_init
@dataclass(frozen=True, slots=True)
class PreparedPrompt:
    body: Mapping[str, JSON]  # the client's JSON after deterministic edits
    request: ChatRequest  # the canonical request after the same edits
    session_root: str  # tenant-scoped hash of tools + system + first user message
    cache_salt: str
    prefix_hashes: tuple[bytes, ...] = ()
    stable_prefix_tokens: int = 0
    diagnosis: object | None = None  # what prepare() learned, for observe() (opaque here)
    write_ttl: str = "5m"  # the longest TTL of a cache marker in the prompt ("5m" or "1h")
    public_head: tuple[int, int] = (0, 0)  # (tools, system blocks) declared public, leading
    scope_line: str = ""  # the tenant's cache-scope line the prompt carries ("": none)


class PromptPort(Protocol):
    def ready(self, tenant: str) -> Awaitable[None] | None:
        """What a call of `tenant` awaits before `prepare` (shared state the port reads once
        in a while), or None when nothing."""
        ...

    def prepare(
        self,
        wire: WireFormat,
        body: Mapping[str, JSON],
        request: ChatRequest,
        tenant: TenantPolicy,
        model: str,
    ) -> PreparedPrompt: ...

    def observe(
        self, tenant: TenantPolicy, session_key: str, prepared: PreparedPrompt
    ) -> CacheVerdict: ...  # `session_key`: gateway.core.calls.session_key

    def reconcile(self, verdict: CacheVerdict, usage: Usage) -> None: ...

    def answer_hashes(
        self, wire: WireFormat, tenant: TenantPolicy, prepared: PreparedPrompt, answer: Message
    ) -> tuple[bytes, ...]: ...  # the prefix chain of prompt + answer (the next call's start)


@slot_init
@dataclass(frozen=True, slots=True)
class CacheVerdict:
    header: str  # value of x-lantern-cache
    diagnosis_json: str  # small JSON for the ledger, never prompt text
    # the tenant-scoped key of the prefix head this call is expected to write (the provider
    # does not hold it yet), for the fan-out gate; None when a read of it is expected
    write_key: str | None = None
    # `diagnosis_json` decoded, when the port built it (its readers then decode nothing);
    # read it through `diagnosis_body`, never edit it in place
    diagnosis: Mapping[str, object] | None = field(default=None, compare=False)

    def diagnosis_body(self) -> Mapping[str, object]:
        """The diagnosis as an object: the one the port built, else `diagnosis_json` decoded."""
        if self.diagnosis is not None:
            return self.diagnosis
        body: Mapping[str, object] = orjson.loads(self.diagnosis_json)
        return body


@slot_init
@dataclass(frozen=True, slots=True)
class Attempt:
    candidate: Candidate
    reason: str
    # False: the router keeps no prefix index for this candidate (the only one it could pick),
    # so the pipeline works out no answer chain to extend it with
    indexed: bool = True


@slot_init
@dataclass(frozen=True, slots=True)
class RoutePlan:
    attempts: tuple[Attempt, ...]  # first choice, then the fallback chain
    details: Mapping[str, JSON] = field(default_factory=dict)


class RoutingPort(Protocol):
    """Sessions come as `session_key`s (gateway.core.calls.session_key): scoped by tenant, so
    one tenant sending another's session id never reaches that session's entries."""

    def recall(self, tenant: str, session_key: str) -> Awaitable[None] | None:
        """The session's shared affinity, recalled when awaited; None when nothing is shared."""

    def plan(
        self,
        route: ModelRoute,
        tenant: TenantPolicy,
        session_key: str,
        prepared: PreparedPrompt,
        prompt_tokens: int,
        max_tokens: int,
    ) -> RoutePlan: ...

    def queue(self, plan: RoutePlan, tenant: TenantPolicy) -> Awaitable[RoutePlan] | None:
        """The wait for the plan's replica when it is at capacity (the plan back, with the
        queue time in its details); None when the call may go now."""

    def release(self, plan: RoutePlan) -> None: ...  # given up before dispatch: free its slot

    def on_dispatch(self, attempt: Attempt, session_key: str, prepared: PreparedPrompt) -> None: ...

    def on_first_token(self, attempt: Attempt) -> None: ...  # prefill done: load eases

    def on_complete(
        self, attempt: Attempt, usage: Usage, ok: bool, fault: Fault = "backend"
    ) -> None: ...  # `fault` matters only when not ok

    def context_window(self, route: ModelRoute, tenant: TenantPolicy) -> int | None: ...

    def extend(self, attempt: Attempt, chain_hashes: tuple[bytes, ...]) -> None: ...  # the answer


@slot_init
@dataclass(frozen=True, slots=True)
class CallRecord:
    """One ledger row: counts and money, never prompt or completion text."""

    request_id: str
    attempt: int
    tenant: str
    key_id: str
    session_id: str
    model: str
    backend: str
    replica: str | None
    status: str  # ok | error | client_disconnect
    error_kind: str | None
    usage: Usage
    cost_usd: float
    uncached_cost_usd: float
    ttft_ms: float | None
    latency_ms: float
    cache_diagnosis: str | None
    door: str | None = None  # the client's route: chat.completions, messages, responses, embeddings
    # the call's cache profit and loss (gateway/core/cache_money.py)
    cache_saved_usd: float = 0.0
    cache_premium_usd: float = 0.0
    cache_lost_usd: float = 0.0
    cache_cause: str | None = None
    queue_ms: float | None = None  # waited in the gateway for a replica slot (first attempt)


class LedgerPort(Protocol):
    def record(self, row: CallRecord) -> None:
        """Called before the call's reply completes. Returns once the row survives the death
        of the process (in the local spool); never waits on the database, never raises."""
        ...


class ModelTable(Protocol):
    def get(self, name: str) -> ModelRoute | None: ...

    def names(self) -> Sequence[str]: ...
