"""`TokenCounting` ports: tiktoken (adapters.tokens) for API providers, and per model route the
count its self-hosted engines will bill (gateway/core/engine_tokens.py): prompt caps and reservations
are enforced on it.

Give tiktoken the counter the prompt cache encodes with: both then read one memo of token ids."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from adapters.tokens import TokenCounter, TokenIdsMemo
from adapters.types import ChatRequest
from gateway.backend_settings import OpenAICompatibleBackend
from gateway.core.engine_prompt import EnginePrompt, engine_prompt
from gateway.core.engine_tokens import ChatPromptCounter, EngineTokenizers, bound, card_from_dir

if TYPE_CHECKING:
    from gateway.ports import ModelRoute
    from gateway.settings import Settings


class TiktokenCounting:
    def __init__(self, counter: TokenCounter | None = None) -> None:
        self._counter = counter or TokenCounter(TokenIdsMemo())

    def count_prompt(self, request: ChatRequest, scope: str) -> int:
        return self._counter.count_request(request, scope)

    def count_text(self, model: str, text: str, scope: str) -> int:
        return self._counter.count_text(model, text, scope)

    @property
    def counter(self) -> TokenCounter:
        return self._counter


class RouteTokenCounting:
    """The prompt tokens a call may be billed, by model route: the most any backend of the route
    bills. An API backend: the tiktoken count. A self-hosted replica whose tokenizer is known:
    its engine's exact count. One whose tokenizer is not known yet: the upper bound
    (`engine_tokens.bound`) for the bundled engine (`bounded`), the tiktoken estimate for other
    OpenAI-compatible servers that serve no tokenizer and were given no `tokenizer_dir`."""

    def __init__(
        self,
        base: TiktokenCounting,
        tokenizers: EngineTokenizers,
        replicas: Mapping[str, tuple[str, ...]],
        bounded: frozenset[str],
        api_routes: frozenset[str],
    ) -> None:
        self._base = base
        self.tokenizers = tokenizers
        self._replicas = dict(replicas)  # route -> its self-hosted replicas' base URLs
        self._bounded = bounded  # replicas of the bundled engine
        self._api_routes = api_routes  # routes with at least one API backend

    def count_prompt(self, request: ChatRequest, scope: str) -> int:
        replicas = self._replicas.get(request.model)
        if not replicas:
            return self._base.count_prompt(request, scope)
        prompt: EnginePrompt | None = None  # built once, when a replica needs it
        counts: dict[object, int] = {}  # by counter: replicas of one engine share it
        estimate = request.model in self._api_routes
        for replica in replicas:
            counter = self.tokenizers.get(replica)
            if counter is None and replica not in self._bounded:
                estimate = True
                continue
            if prompt is None:
                prompt = engine_prompt(request)
            if counter is None:
                counts["bound"] = bound(prompt)
            elif counter not in counts:
                counts[counter] = counter.count(prompt)
        if estimate:
            counts["tiktoken"] = self._base.count_prompt(request, scope)
        return max(counts.values())

    def count_text(self, model: str, text: str, scope: str) -> int:
        return self._base.count_text(model, text, scope)

    @property
    def counter(self) -> TokenCounter:
        return self._base.counter

    def with_base(self, base: TiktokenCounting) -> RouteTokenCounting:
        """The same routes and engine tokenizers over other tiktoken memos (another thread's)."""
        return RouteTokenCounting(
            base, self.tokenizers, self._replicas, self._bounded, self._api_routes
        )


def route_counting(
    settings: Settings, routes: Sequence[ModelRoute], base: TiktokenCounting
) -> RouteTokenCounting:
    """The counting of the configured routes: the self-hosted replicas of each (their base
    URLs, as the model table built them), which of them are counted exactly (the bundled
    engine, once fetched; a server given `tokenizer_dir`, from the start)."""
    kinds = {b.name: b.kind for m in settings.models for b in m.backends}
    dirs = {
        b.name: b.tokenizer_dir
        for m in settings.models
        for b in m.backends
        if isinstance(b, OpenAICompatibleBackend) and b.tokenizer_dir is not None
    }
    replicas: dict[str, tuple[str, ...]] = {}
    bounded: set[str] = set()
    api_routes: set[str] = set()
    for route in routes:
        urls = []
        for c in route.candidates:
            if c.venue != "selfhost" or c.replica is None:
                api_routes.add(route.name)
                continue
            urls.append(c.replica)
            if kinds.get(c.backend_name) == "selfhost" or c.backend_name in dirs:
                bounded.add(c.replica)
        if urls:
            replicas[route.name] = tuple(dict.fromkeys(urls))
    tokenizers = EngineTokenizers(sorted({u for urls in replicas.values() for u in urls}))
    counters = {name: ChatPromptCounter(card_from_dir(path)) for name, path in dirs.items()}
    for route in routes:
        for c in route.candidates:
            if c.backend_name in counters and c.replica is not None:
                tokenizers.preload(c.replica, counters[c.backend_name])
    return RouteTokenCounting(base, tokenizers, replicas, frozenset(bounded), frozenset(api_routes))
