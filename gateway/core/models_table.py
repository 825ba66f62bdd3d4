"""Client model names → candidates (backends, one per self-hosted replica), and their prices.

Built once from settings; an unknown price is an error at start-up, never $0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal

from adapters.backends.factory import build_backend
from adapters.backends.spec import BackendSpec
from adapters.http.upstream import HTTPClient
from adapters.pricing import (
    CACHE_WRITE_1H_FACTOR,
    CACHE_WRITE_FACTOR,
    WEB_SEARCH_USD,
    Price,
    PriceBook,
    UnknownPrice,
    cost_decimal,
    uncached_cost_decimal,
    worst_case_cost,
)
from adapters.types import Usage
from gateway.backend_settings import (
    AnthropicBackend,
    BackendSettings,
    LiteLLMBackend,
    OpenAICompatibleBackend,
    PriceOverride,
    SelfhostBackend,
)
from gateway.engine_child import EngineChild
from gateway.fleet.routing_port import ReplicaSpec
from gateway.ports import Candidate, ModelRoute, Venue
from gateway.settings import Settings
from gateway.telemetry.traces import server_of
from routing.types import Prices, TokenPrices

_PER_MTOK = Decimal(1_000_000)


class ModelTableImpl:
    def __init__(self, routes: Sequence[ModelRoute]) -> None:
        self._routes = {r.name: r for r in routes}

    def get(self, name: str) -> ModelRoute | None:
        return self._routes.get(name)

    def names(self) -> Sequence[str]:
        return list(self._routes)

    def routes(self) -> list[ModelRoute]:
        return list(self._routes.values())


def _specs(b: BackendSettings, children: list[EngineChild]) -> list[tuple[BackendSpec, str | None]]:
    """One spec per replica; a `selfhost` backend with model_path becomes a child engine."""

    def spec(**kw: object) -> BackendSpec:
        return BackendSpec(name=b.name, kind=b.kind, timeout_s=b.timeout_s, **kw)  # type: ignore[arg-type]

    if isinstance(b, SelfhostBackend) and b.model_path is not None:
        child = EngineChild(b.name, b.model_path, b.host, b.port, b.device, b.dtype)
        children.append(child)
        return [(spec(base_url=child.base_url, model=b.model), child.base_url)]
    if isinstance(b, SelfhostBackend):
        return [(spec(base_url=url, model=b.model), url) for url in b.base_urls()]
    if isinstance(b, OpenAICompatibleBackend):
        key = b.api_key()
        extra: dict[str, str | bool] = {
            "send_cache_salt": b.sends_cache_salt,
            "engine": b.engine,
            "responses": b.responses,
        }
        return [
            (spec(base_url=url, model=b.model, api_key=key, extra=extra), url)
            for url in b.base_urls()
        ]
    if isinstance(b, AnthropicBackend):
        betas = {"anthropic_beta": ",".join(b.anthropic_beta)}
        return [(spec(base_url=b.base_url, model=b.model, api_key=b.api_key(), extra=betas), None)]
    if isinstance(b, LiteLLMBackend):
        return [(spec(base_url=b.api_base, model=b.model, api_key=b.api_key()), None)]
    converse: dict[str, str] = {"anthropic_beta": ",".join(b.anthropic_beta)}
    if b.region:  # none: the AWS chain decides
        converse["region"] = b.region
    if b.embeddings:
        converse["embeddings"] = b.embeddings
    converse["input_type"] = b.input_type
    return [(spec(model=b.model, base_url=b.endpoint_url, extra=converse), None)]


def _upstream_url(spec: BackendSpec) -> str | None:
    """The URL a backend's calls go to; Bedrock's regional endpoint when none is set and the
    region is (else the AWS SDK picks it); None where the SDK decides (LiteLLM's default)."""
    region = spec.extra.get("region")
    if spec.base_url is None and spec.kind == "bedrock" and region:
        return f"https://bedrock-runtime.{region}.amazonaws.com"
    return spec.base_url


def build_model_table(
    settings: Settings, http: HTTPClient
) -> tuple[ModelTableImpl, list[EngineChild]]:
    children: list[EngineChild] = []
    routes = []
    for route in settings.models:
        candidates = []
        for backend in route.backends:
            venue: Venue = (
                "selfhost" if backend.kind in ("selfhost", "openai_compatible") else "api"
            )
            for spec, replica in _specs(backend, children):
                live = build_backend(spec, http=http)
                server = server_of(_upstream_url(spec))  # once per backend, for its spans
                candidates.append(Candidate(live, spec.name, venue, replica, server))
        routes.append(ModelRoute(route.name, tuple(candidates)))
    return ModelTableImpl(routes), children


def shares_provider_cache(backend: BackendSettings) -> bool:
    """Whether tenants calling through this backend could share prompt-cache entries: an API
    provider behind shared credentials, or an OpenAI-compatible server not sent `cache_salt`
    (`engine: other` unless `cache_salt: true`). The bundled engine keys its prefix cache with
    the salt."""
    if backend.dedicated_credentials or isinstance(backend, SelfhostBackend):
        return False
    if isinstance(backend, OpenAICompatibleBackend):
        return not backend.sends_cache_salt
    return True


def shared_cache_models(settings: Settings) -> frozenset[str]:
    """The model routes with at least one backend whose provider cache tenants would share."""
    return frozenset(
        route.name for route in settings.models if any(map(shares_provider_cache, route.backends))
    )


def marked_models(settings: Settings) -> frozenset[str]:
    """The model routes with at least one backend that sends cache markers on: Anthropic's
    `cache_control`, Bedrock's cache points, LiteLLM's pass-through. An OpenAI-compatible server
    (the bundled engine's kind too) caches prefixes without them and is sent none."""
    return frozenset(
        route.name for route in settings.models if any(map(takes_cache_markers, route.backends))
    )


def takes_cache_markers(backend: BackendSettings) -> bool:
    return not isinstance(backend, OpenAICompatibleBackend | SelfhostBackend)


def _override(o: PriceOverride, base: Price | None, model: str) -> Price:
    def per_token(value: float | None, fallback: Decimal | None) -> Decimal:
        if value is not None:
            return Decimal(repr(value)) / _PER_MTOK
        if fallback is None:
            raise UnknownPrice(model)
        return fallback

    inp = per_token(o.input, base.input if base else None)
    return Price(
        input=inp,
        output=per_token(o.output, base.output if base else None),
        cache_read=per_token(o.cache_read, base.cache_read if base else inp * Decimal("0.1")),
        cache_write=per_token(
            o.cache_write, base.cache_write if base else inp * CACHE_WRITE_FACTOR
        ),
        cache_write_1h=per_token(
            o.cache_write_1h, base.cache_write_1h if base else inp * CACHE_WRITE_1H_FACTOR
        ),
        web_search=(
            Decimal(repr(o.web_search))
            if o.web_search is not None
            else (base.web_search if base else WEB_SEARCH_USD)
        ),
    )


class RoutePricing:
    """`Pricing` port: the price of a client model name (config override, else LiteLLM's map)."""

    def __init__(self, prices: Mapping[str, Price]) -> None:
        self._prices = dict(prices)

    @classmethod
    def from_settings(cls, settings: Settings) -> RoutePricing:
        book = PriceBook.from_litellm()
        prices: dict[str, Price] = {}
        for route in settings.models:
            base = book.price_for(route.name) if book.has_price(route.name) else None
            if base is None:  # the first backend's upstream model name may be priced
                upstream = getattr(route.backends[0], "model", None)
                base = book.price_for(upstream) if upstream and book.has_price(upstream) else None
            override = settings.prices.get(route.name)
            if override is not None:
                prices[route.name] = _override(override, base, route.name)
            elif base is not None:
                prices[route.name] = base
            else:
                raise UnknownPrice(route.name)
        return cls(prices)

    def price(self, model: str) -> Price:
        return self._prices[model]

    def cost_usd(self, model: str, usage: Usage) -> float:
        """`cost(usage, price)`, its sum taken here (a call less, three times a call)."""
        return float(cost_decimal(usage, self._prices[model]))

    def uncached_cost_usd(self, model: str, usage: Usage) -> float:
        """`uncached_cost(usage, price)`, as `cost_usd`."""
        return float(uncached_cost_decimal(usage, self._prices[model]))

    def worst_case_usd(
        self, model: str, prompt_tokens: int, max_output_tokens: int, write_ttl: str
    ) -> float:
        return worst_case_cost(prompt_tokens, max_output_tokens, self._prices[model], write_ttl)


def _per_mtok(value: Decimal) -> float:
    return float(value * _PER_MTOK)


def fleet_inputs(settings: Settings, routes: RoutePricing) -> tuple[Prices, dict[str, ReplicaSpec]]:
    """What the router weighs: API token prices per API backend, $/h and capacity per fleet."""
    book = PriceBook.from_litellm()
    api: dict[str, TokenPrices] = {}
    per_hour: dict[str, float] = {}
    specs: dict[str, ReplicaSpec] = {}
    for route in settings.models:
        for b in route.backends:
            if b.kind in ("selfhost", "openai_compatible"):
                if b.price_per_hour_usd is not None:
                    per_hour[b.name] = b.price_per_hour_usd
                default = ReplicaSpec()
                specs[b.name] = ReplicaSpec(
                    prefill_tok_s=b.prefill_tok_s or default.prefill_tok_s,
                    prefill_pinned=settings.fleet.pin_prefill_tok_s,
                    capacity_tok_s=b.capacity_tok_s or default.capacity_tok_s,
                    kv_capacity_blocks=b.kv_capacity_blocks or default.kv_capacity_blocks,
                    metrics_path=b.metrics_path,
                    max_in_flight=b.max_in_flight,
                )
                continue
            upstream = getattr(b, "model", None)
            price = (
                book.price_for(upstream)
                if upstream and book.has_price(upstream)
                else routes.price(route.name)
            )
            api[b.name] = TokenPrices(
                _per_mtok(price.input),
                _per_mtok(price.output),
                _per_mtok(price.cache_read),
                _per_mtok(price.cache_write),
            )
    return Prices(api=api, replica_usd_per_h=per_hour), specs
