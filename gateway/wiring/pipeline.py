"""The request pipeline of one gateway process, and what rides on it: keep-warm reads
(`cache.keep_warm`, gateway/core/keep_warm.py), whose loop `process.py` starts and stops."""

from __future__ import annotations

from collections.abc import Callable

from gateway.core.admission import Admission
from gateway.core.keep_warm import KeepWarm
from gateway.core.models_table import ModelTableImpl, RoutePricing
from gateway.core.pipeline import Pipeline, PipelineParts
from gateway.telemetry import Telemetry
from gateway.wiring.ledger import LedgerParts
from gateway.wiring.parts import FleetParts, PromptParts


def build_pipeline(
    models: ModelTableImpl,
    pricing: RoutePricing,
    admission: Admission,
    prompt: PromptParts,
    fleet: FleetParts,
    ledger: LedgerParts,
    telemetry: Telemetry,
    clock: Callable[[], float],
) -> tuple[Pipeline, KeepWarm]:
    pipeline = Pipeline(
        PipelineParts(
            models=models,
            counter=prompt.counting,
            pricing=pricing,
            admission=admission,
            prompts=prompt.prompts,
            routing=fleet.fleet,
            ledger=ledger.ledger,
            telemetry=telemetry,
            clock=clock,
            measure_lane=prompt.lane,
        )
    )
    # tenants with cache.keep_warm: their paused sessions' entries, read before they expire
    warm = KeepWarm(pipeline, prompt.prompts.autopilot, clock)
    pipeline.observers.append(warm)
    return pipeline, warm
