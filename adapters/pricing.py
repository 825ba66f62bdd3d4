"""Per-token prices from LiteLLM's bundled cost map plus operator overrides, and the cost of a
call's usage in exact decimal arithmetic.

Never prices an unknown model at $0: `price_for` raises UnknownPrice (checked at startup).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType, ModuleType
from typing import Any

from adapters.errors import AdapterError
from adapters.tokens import use_bundled_tiktoken_files
from adapters.types import Usage

CACHE_READ_FACTOR = Decimal("0.1")  # provider norm (note C2): a cache read costs 0.1 x input
CACHE_WRITE_FACTOR = Decimal("1.25")  # a 5-minute cache write costs 1.25 x input
CACHE_WRITE_1H_FACTOR = Decimal("2")  # a 1-hour cache write costs 2 x input
# USD per server-side web search where the cost map names none: Anthropic's $10 per 1,000
WEB_SEARCH_USD = Decimal("0.01")


class UnknownPrice(AdapterError):
    """No price is known for a model: configure an override or pick a priced model."""

    def __init__(self, model: str) -> None:
        super().__init__(f"no price known for model {model!r}")
        self.model = model


@dataclass(frozen=True, slots=True)
class Price:
    """USD per token, by token kind."""

    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal  # a write with the 5-minute TTL
    cache_write_1h: Decimal  # a write with the 1-hour TTL
    web_search: Decimal = WEB_SEARCH_USD  # USD per server-side web search, not per token

    def heaviest_prompt_token(self, write_ttl: str) -> Decimal:
        """The most one prompt token can cost when the call's cache writes have `write_ttl`
        ("5m" or "1h"; automatic caching writes at the 5-minute rate): what a dollar hold
        prices the prompt at."""
        write = self.cache_write_1h if write_ttl == "1h" else self.cache_write
        return max(self.input, self.cache_read, write)


def import_litellm_offline() -> ModuleType:
    """Import LiteLLM with its bundled cost map and tokenizers (no network at import)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_TELEMETRY_DISABLED", "true")
    use_bundled_tiktoken_files()
    import litellm

    litellm.suppress_debug_info = True  # no "Give Feedback" banners on every provider error
    return litellm


COST_MAP_FILE = "model_prices_and_context_window_backup.json"


@functools.cache
def bundled_cost_map() -> Mapping[str, Mapping[str, Any]]:
    """LiteLLM's bundled cost map, read from the file LiteLLM ships (the one
    `LITELLM_LOCAL_MODEL_COST_MAP` makes LiteLLM itself load) without importing LiteLLM: the
    import takes seconds, and a gateway with no LiteLLM backend never needs it. An entry that
    is an `alias_of` another takes the other's fields under its own. Read once per process
    (the route prices and the router's prices both start from it), so it is read-only."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("litellm is not installed: its cost map prices every model")
    path = os.path.join(spec.submodule_search_locations[0], COST_MAP_FILE)
    with open(path, encoding="utf-8") as handle:
        raw: dict[str, Any] = json.load(handle)
    resolved = {
        name: MappingProxyType(dict(_resolved(raw, name, 0)))
        for name, entry in raw.items()
        if isinstance(entry, Mapping)
    }
    return MappingProxyType(resolved)


def _resolved(raw: Mapping[str, Any], name: str, depth: int) -> Mapping[str, Any]:
    entry = raw[name]
    target = entry.get("alias_of")
    if target is None or target not in raw or depth > 8:
        return entry
    own = {k: v for k, v in entry.items() if k != "alias_of"}
    return {**_resolved(raw, target, depth + 1), **own}


def _decimal(value: Any) -> Decimal | None:
    if value is None or isinstance(value, bool):
        return None
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def price_from_entry(entry: Mapping[str, Any]) -> Price | None:
    """A Price from one LiteLLM cost-map entry.

    When the entry lacks cache prices they are derived from the input price: read = 0.1 x
    input, write = 1.25 x input (5 minutes), 1 h write = 2 x input. None when no input/output
    price.
    """
    input_price = _decimal(entry.get("input_cost_per_token"))
    output_price = _decimal(entry.get("output_cost_per_token"))
    if input_price is None or output_price is None:
        return None
    read = _decimal(entry.get("cache_read_input_token_cost"))
    write = _decimal(entry.get("cache_creation_input_token_cost"))
    write_1h = _decimal(entry.get("cache_creation_input_token_cost_above_1hr"))
    search = entry.get("search_context_cost_per_query")
    per_search = (
        _decimal(search.get("search_context_size_medium")) if isinstance(search, Mapping) else None
    )
    return Price(
        input=input_price,
        output=output_price,
        cache_read=read if read is not None else input_price * CACHE_READ_FACTOR,
        cache_write=write if write is not None else input_price * CACHE_WRITE_FACTOR,
        cache_write_1h=write_1h if write_1h is not None else input_price * CACHE_WRITE_1H_FACTOR,
        web_search=per_search if per_search is not None else WEB_SEARCH_USD,
    )


class PriceBook:
    """Overrides first, then the cost map under the model's name, then with provider prefixes
    (`anthropic/`, `bedrock/`, ...) stripped one at a time."""

    def __init__(
        self,
        model_cost: Mapping[str, Mapping[str, Any]],
        overrides: Mapping[str, Price] | None = None,
    ) -> None:
        self._model_cost = model_cost
        self._overrides = dict(overrides or {})
        self._resolved: dict[str, Price] = {}

    @classmethod
    def from_litellm(cls, overrides: Mapping[str, Price] | None = None) -> PriceBook:
        return cls(bundled_cost_map(), overrides)

    def price_for(self, model: str) -> Price:
        found = self._resolved.get(model)
        if found is not None:
            return found
        name = model
        while True:
            price = self._overrides.get(name)
            if price is None and name in self._model_cost:
                price = price_from_entry(self._model_cost[name])
            if price is not None:
                self._resolved[model] = price
                return price
            if "/" not in name:
                raise UnknownPrice(model)
            name = name.split("/", 1)[1]

    def has_price(self, model: str) -> bool:
        try:
            self.price_for(model)
        except UnknownPrice:
            return False
        return True


def cost_decimal(usage: Usage, price: Price) -> Decimal:
    one_hour = min(usage.cache_write_1h_tokens, usage.cache_write_tokens)
    return (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + (usage.cache_write_tokens - one_hour) * price.cache_write
        + one_hour * price.cache_write_1h
        + usage.web_search_requests * price.web_search
    )


def worst_case_cost(
    prompt_tokens: int, max_output_tokens: int, price: Price, write_ttl: str
) -> float:
    """The dollar hold of a call: every prompt token at the heaviest price it can be billed at
    (a cache write with `write_ttl` included), every allowed output token at the output price."""
    heaviest = price.heaviest_prompt_token(write_ttl)
    return float(prompt_tokens * heaviest + max_output_tokens * price.output)


def cost(usage: Usage, price: Price) -> float:
    """USD for this usage (exact decimal sum, converted once)."""
    return float(cost_decimal(usage, price))


def uncached_cost_decimal(usage: Usage, price: Price) -> Decimal:
    return (
        usage.prompt_tokens * price.input
        + usage.output_tokens * price.output
        + usage.web_search_requests * price.web_search
    )


def uncached_cost(usage: Usage, price: Price) -> float:
    """What the same tokens would have cost with no prompt cache: every prompt token at the
    input price (the searches as priced). `uncached_cost - cost` is the money caching saved
    (negative when writes outweighed reads)."""
    return float(uncached_cost_decimal(usage, price))
