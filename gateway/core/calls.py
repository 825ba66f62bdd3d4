"""One call on its way through the pipeline: the call as it came in, the admitted call, and the
rules that shape it before anything is reserved (its route, its max_tokens within the tenant's
cap and the model's context window, its session). Pure: raises the typed errors, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from adapters.records import slot_init
from adapters.types import JSON, ChatRequest, WireFormat
from adapters.wire.codec import codec_for
from gateway.core.identifiers import check_identifiers
from gateway.errors import PermissionDenied, RequestRejected, UnknownModel
from gateway.ports import (
    AdmissionPort,
    CacheVerdict,
    ModelRoute,
    ModelTable,
    PreparedPrompt,
    RoutePlan,
    Ticket,
)
from gateway.telemetry import CallTrace, ClientTrace
from policies.model import TenantPolicy

DEFAULT_MAX_TOKENS = 4096


@slot_init
@dataclass(frozen=True, slots=True)
class IncomingCall:
    wire: WireFormat
    tenant: TenantPolicy
    key_id: str
    request: ChatRequest
    body: Mapping[str, JSON]
    session_header: str | None = None
    body_bytes: int = 0  # the size of the client's body (large ones are measured in a thread)
    door: str | None = None  # the route the client called, when `wire` does not tell it
    native_body: Mapping[str, JSON] | None = None  # the door's own body (BackendCall's)

    @property
    def door_name(self) -> str:
        """The client's route as the ledger and spans name it."""
        if self.door is not None:
            return self.door
        return codec_for(self.wire).door

    betas: tuple[str, ...] = ()  # the client's `anthropic-beta` values
    trace: ClientTrace | None = None  # the client's trace context (read only while tracing)

    def __post_init__(self) -> None:
        # the one check of client identifiers, before anything is reserved or called
        check_identifiers(self.wire, self.request, self.session_header, self.body)


@slot_init
@dataclass(frozen=True, slots=True)
class Admitted:
    call: IncomingCall
    request_id: str
    route: ModelRoute
    prepared: PreparedPrompt
    session_id: str
    prompt_tokens: int
    max_tokens: int
    ticket: Ticket
    plan: RoutePlan
    verdict: CacheVerdict
    started_s: float
    # `thinking.budget_tokens` lowered with a clamped `max_tokens` (None: as the client sent it)
    thinking_budget: int | None = None
    trace: CallTrace | None = None  # the call's spans; None while nothing is traced

    @property
    def session_key(self) -> str:
        """The key of the call's session in Lantern's own tables (`session_key`)."""
        return session_key(self.call.tenant.tenant, self.session_id)

    def headers(self, admission: AdmissionPort) -> dict[str, str]:
        out = {
            "x-lantern-request-id": self.request_id,
            "x-lantern-session": self.session_id,
            "x-lantern-cache": self.verdict.header,
            **admission.rate_headers(self.ticket),
        }
        queued_ms = self.plan.details.get("queued_ms")
        if queued_ms is not None:  # it waited for a slot on its replica
            out["x-lantern-queue-ms"] = str(queued_ms)
        asked = self.call.request.max_tokens
        if asked is not None and self.max_tokens < asked:  # clamped to the tenant's cap
            out["x-lantern-max-tokens-clamped"] = str(self.max_tokens)
            if self.thinking_budget is not None:
                out["x-lantern-thinking-budget-clamped"] = str(self.thinking_budget)
        return out


def route_for(models: ModelTable, call: IncomingCall) -> ModelRoute:
    """The call's model route, if the tenant may use it."""
    model = call.request.model
    route = models.get(model)
    if route is None:
        raise UnknownModel(model)
    if call.tenant.models and model not in call.tenant.models:
        raise PermissionDenied(
            f"model '{model}' is not allowed for tenant '{call.tenant.tenant}'",
            rule="models",
            field="model",
        )
    allowed = call.tenant.backends
    if allowed is not None and not any(c.backend_name in allowed for c in route.candidates):
        raise PermissionDenied(
            f"no backend of model '{model}' is allowed for tenant '{call.tenant.tenant}'",
            rule="backends",
            field="model",
        )
    return route


def max_tokens_for(call: IncomingCall) -> int:
    """What the call may generate: the client's `max_tokens` within the tenant's cap."""
    limits = call.tenant.limits
    cap = limits.max_output_tokens
    asked = call.request.max_tokens
    if asked is None:
        return cap if cap is not None else DEFAULT_MAX_TOKENS
    if asked < 1:
        raise RequestRejected(
            "max_tokens must be at least 1", rule="max_tokens", field="max_tokens"
        )
    if cap is not None and asked > cap:
        if limits.on_max_tokens_over == "clamp":
            return cap
        raise RequestRejected(
            f"max_tokens {asked} exceeds tenant limit max_output_tokens {cap}",
            rule="max_output_tokens",
            field="max_tokens",
        )
    return asked


# Anthropic's smallest `thinking.budget_tokens`; the budget must also stay below `max_tokens`
MIN_THINKING_BUDGET = 1024


def thinking_budget_for(call: IncomingCall, max_tokens: int) -> int | None:
    """The thinking budget for a `max_tokens` the gateway lowered (the tenant's cap, the
    context window): the client's budget scaled down with it when it no longer fits below it,
    kept at the provider's minimum; None when it fits as sent. A 400 naming the budget when
    no valid budget fits (the provider would refuse the call after it was reserved)."""
    thinking = call.request.extra.get("thinking")
    if not isinstance(thinking, Mapping) or thinking.get("type") != "enabled":
        return None
    budget, asked = thinking.get("budget_tokens"), call.request.max_tokens
    if not isinstance(budget, int) or budget < max_tokens:
        return None
    if max_tokens <= MIN_THINKING_BUDGET:
        raise RequestRejected(
            f"thinking.budget_tokens {budget} does not fit max_tokens {max_tokens} (lowered to "
            f"the tenant's limit); the provider's smallest budget is {MIN_THINKING_BUDGET} "
            "and must be below max_tokens",
            rule="max_output_tokens",
            field="thinking.budget_tokens",
        )
    scaled = budget * max_tokens // asked if asked else budget
    return max(MIN_THINKING_BUDGET, min(scaled, max_tokens - 1))


def with_thinking_budget(
    request: ChatRequest, body: dict[str, JSON] | None, budget: int
) -> tuple[ChatRequest, dict[str, JSON] | None]:
    """The call's request and raw body (where forwarded) with `thinking.budget_tokens` set."""
    thinking = {**request.extra["thinking"], "budget_tokens": budget}
    request = replace(request, extra={**request.extra, "thinking": thinking})
    if body is not None and "thinking" in body:
        body["thinking"] = thinking
    return request, body


def check_prompt_cap(call: IncomingCall, prompt_tokens: int, field: str = "messages") -> None:
    """The tenant's `max_prompt_tokens`, on the count the backend will bill; `field` is the
    body field that holds the prompt (`input` at the embeddings door)."""
    cap = call.tenant.limits.max_prompt_tokens
    if cap is not None and prompt_tokens > cap:
        raise RequestRejected(
            f"prompt has {prompt_tokens} tokens; tenant limit max_prompt_tokens is {cap}",
            rule="max_prompt_tokens",
            field=field,
        )


def fit_window(
    call: IncomingCall, route: ModelRoute, prompt_tokens: int, max_tokens: int, window: int | None
) -> int:
    """`max_tokens` such that prompt + max_tokens fits the route's context window, where
    known: a value the gateway filled in is lowered to fit; one the client asked for that
    does not fit is a 400 (the backend would refuse it after the call was paid for)."""
    if window is None or prompt_tokens + max_tokens <= window:
        return max_tokens
    room = window - prompt_tokens
    if room < 1:
        raise RequestRejected(
            f"prompt has {prompt_tokens} tokens; the context window of model "
            f"'{route.name}' is {window} tokens",
            rule="context_window",
            field="messages",
        )
    if call.request.max_tokens is None:
        return room
    raise RequestRejected(
        f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) is more than the "
        f"context window of model '{route.name}' ({window} tokens); at most {room} fits",
        rule="context_window",
        field=max_tokens_field(call.wire, call.body),
    )


def session_id_for(call: IncomingCall, prepared: PreparedPrompt) -> str:
    """An explicit session (header, then the client's own keys), else the prompt's root."""
    if call.session_header:
        return call.session_header
    if call.request.session_id:
        return call.request.session_id
    if call.request.prompt_cache_key:
        return call.request.prompt_cache_key
    return prepared.session_root


def session_key(tenant: str, session_id: str) -> str:
    """The session as every table in the gateway keys it (the router's and the shared affinity,
    the cache diagnosis): a session id is the client's to choose, so two tenants sending the same
    one are two sessions. Tenant ids have no ':' (policies/model.py), so keys never collide.
    Nothing that leaves the gateway (upstream headers, the ledger, replies) carries it."""
    return f"{tenant}:{session_id}"


def budget_session_for(call: IncomingCall) -> str | None:
    """The session that `calls_per_session` counts: only one the client named (header,
    `prompt_cache_key`, Anthropic `metadata.user_id`, OpenAI `user` or `safety_identifier`).
    A call without one is not counted: two independent runs of one agent share a
    conversation root, never a budget."""
    request = call.request
    for named in (call.session_header, request.session_id, request.prompt_cache_key, request.user):
        if named:
            return named
    return None


def max_tokens_field(wire: WireFormat, body: Mapping[str, JSON]) -> str:
    if wire == "openai" and "max_completion_tokens" in body:
        return "max_completion_tokens"
    return "max_tokens"
