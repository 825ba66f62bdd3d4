"""The parts below the pipeline, each built from the settings: token counting and the prompt
cache, the fleet, tenant policies and the store of `/v1/responses` (the ledger is `ledger.py`).

Concrete classes live here; the pipeline sees ports (gateway/ports.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from gateway.core.measure_lane import MeasureLane
from gateway.core.models_table import (
    ModelTableImpl,
    RoutePricing,
    fleet_inputs,
    marked_models,
    shared_cache_models,
)
from gateway.core.prompt_cache import PromptCachePort, TiktokenEncoder
from gateway.core.token_count import RouteTokenCounting, TiktokenCounting, route_counting
from gateway.fleet.registry import indexed_models
from gateway.fleet.routing_port import Fleet, FleetConfig
from gateway.fleet.sharing import FleetSharing
from gateway.fleet.signals import HttpMetricsSource
from gateway.fleet.window import ContextWindows, HttpModelCards
from gateway.policy_archive import DirectoryArchive
from gateway.responses.redis_store import RedisResponseStore
from gateway.responses.store import MemoryResponseStore, ResponseStore
from gateway.settings import Settings
from gateway.telemetry import Metrics
from policies.last_good import KnownNames
from policies.store import PolicyStore


def build_response_store(settings: Settings, clock: Callable[[], float]) -> ResponseStore:
    """Where `/v1/responses` keeps responses: Redis when configured (every process sees them)."""
    ttl_s = settings.responses.ttl_s
    max_entries = settings.responses.max_entries
    if settings.redis_url:  # per tenant there; in all, fairly shared, in this process
        return RedisResponseStore.from_url(
            settings.redis_url, ttl_s, max_entries, max_bytes=settings.responses.max_bytes
        )
    return MemoryResponseStore(ttl_s, max_entries, clock, settings.responses.max_bytes)


@dataclass
class PromptParts:
    """Token counting and the prompt cache, on the loop and in the large-call lane's thread."""

    counting: RouteTokenCounting
    prompts: PromptCachePort
    lane: MeasureLane


def build_prompt_parts(
    settings: Settings, models: ModelTableImpl, metrics: Metrics, clock: Callable[[], float]
) -> PromptParts:
    tiktoken = TiktokenCounting()  # one memo of token ids for counting and prefix hashing
    for model in settings.models:  # load the BPE tables now, not in the first call (~0.4 s)
        tiktoken.counter.encoding(model.name)
    counting = route_counting(settings, models.routes(), tiktoken)
    indexed = indexed_models(models.routes())
    marked = marked_models(settings)
    prompts = PromptCachePort(
        settings.resolve_server_secret(),
        registry=metrics.registry,
        clock=clock,
        encoder=TiktokenEncoder(counter=counting.counter),
        shared_cache_models=shared_cache_models(settings),
        indexed_models=indexed,
        marked_models=marked,
    )
    # the large-call lane's own tiktoken memos (used from a thread); engine tokenizers shared;
    # its tables loaded now too, not in the first large call (and counted in the start-up RSS)
    lane_tiktoken = TiktokenCounting()
    for model in settings.models:
        lane_tiktoken.counter.encoding(model.name)
    lane_counting = counting.with_base(lane_tiktoken)
    lane = MeasureLane(
        PromptCachePort(
            settings.resolve_server_secret(),
            clock=clock,
            encoder=TiktokenEncoder(counter=lane_counting.counter),
            shared_cache_models=shared_cache_models(settings),
            indexed_models=indexed,
            marked_models=marked,
        ),
        lane_counting,
        settings.http.offload_body_bytes,
    )
    return PromptParts(counting, prompts, lane)


@dataclass
class FleetParts:
    """The fleet and the HTTP clients that read its replicas' load and model cards."""

    fleet: Fleet
    scraper: HttpMetricsSource | None
    cards: HttpModelCards
    sharing: FleetSharing | None = None  # affinity and prefix index shared through Redis


def build_fleet(
    settings: Settings,
    models: ModelTableImpl,
    pricing: RoutePricing,
    clock: Callable[[], float],
    registry: CollectorRegistry,
) -> FleetParts:
    prices, replica_specs = fleet_inputs(settings, pricing)
    fs = settings.fleet
    scraper = (
        HttpMetricsSource(clock, timeout_s=fs.signal_timeout_s) if fs.signal_interval_s else None
    )
    cards = HttpModelCards()  # context windows, read with the start-up health check
    windows = {b.name: b.max_model_len for m in settings.models for b in m.backends}
    config = FleetConfig(
        signal_interval_s=fs.signal_interval_s,
        signal_max_age_s=fs.signal_max_age_s,
        signal_timeout_s=fs.signal_timeout_s,
        paid_probe_interval_s=fs.paid_probe_interval_s,
    )
    fleet = Fleet(
        models.routes(),
        config,
        clock=clock,
        rng=random.Random(),
        prices=prices,
        specs=replica_specs,
        metrics=scraper,
        windows=ContextWindows(windows, cards),
    )
    sharing = _sharing(settings, fleet, clock, registry)
    if sharing is not None:
        fleet.share(sharing)
    return FleetParts(fleet, scraper, cards, sharing)


def _sharing(
    settings: Settings, fleet: Fleet, clock: Callable[[], float], registry: CollectorRegistry
) -> FleetSharing | None:
    """Session affinity and the prefix index shared across processes, when Redis is set."""
    if settings.redis_url is None:
        return None
    return FleetSharing.from_url(
        settings.redis_url,
        sessions=fleet.registry.sessions,
        index=lambda: fleet.index,
        clock=clock,
        key_prefix=settings.fleet.shared_key_prefix,
        session_ttl_s=settings.fleet.shared_session_ttl_s,
        slot_lease_s=settings.fleet.shared_slot_lease_s,
        registry=registry,
    )


def build_policies(settings: Settings) -> PolicyStore:
    """Tenant policies, checked against the configured model and backend names, with the last
    good one of each file kept on disk across restarts."""
    return PolicyStore(
        settings.policy_dir,
        poll_interval_s=settings.policy_poll_interval_s,
        known=KnownNames(
            {m.name for m in settings.models}, {b.name for m in settings.models for b in m.backends}
        ),
        archive=DirectoryArchive(settings.var_dir / "policy-last-good"),
    )
