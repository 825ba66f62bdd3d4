"""A call's cache profit and loss in dollars, for its ledger row: what reads saved, what writes
cost over the input price, and what a cache break lost, with the break's cause.

Pure: prices come through the `Pricing` port, the break from the call's cache diagnosis JSON.
`saved - premium` equals `uncached_cost - cost` of the prompt (output is priced the same both ways).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from adapters.records import slot_init
from adapters.types import Usage
from gateway.ports import Pricing

# Diagnosis reason -> the P&L's break cause (docs/cache.md, "Cache profit and loss").
CAUSES = {
    "volatile_block": "volatile_text",
    "system_changed": "volatile_text",
    "tools_changed": "tools_changed",
    "history_rewritten": "history_edit",
    "ttl_expired": "ttl_expiry",
    "options_changed": "options_changed",
    "model_changed": "model_changed",
}
EVICTION = "eviction"  # the prefix was kept, yet the provider read less than predicted
EVICTION_SLACK_TOKENS = 64  # our tokenizer is not the provider's (as in reconcile)
EVICTION_SLACK_RATIO = 0.05


@slot_init
@dataclass(frozen=True, slots=True)
class CacheMoney:
    saved_usd: float = 0.0  # reads: (input - read price) x read tokens
    premium_usd: float = 0.0  # writes: (write - input price) x written tokens
    lost_usd: float = 0.0  # (input - read price) x the cached tokens a break made unreadable
    cause: str | None = None  # why they were lost (None: nothing lost)
    # what the autopilot's edits and fan-out waits saved (docs/cache.md, "Profit and loss")
    autopilot_saved_tokens: int = 0
    autopilot_saved_usd: float = 0.0


def cache_money(
    pricing: Pricing, model: str, usage: Usage, diagnosis_json: str | None
) -> CacheMoney:
    body = None if diagnosis_json is None else orjson.loads(diagnosis_json)
    return cache_money_of(pricing, model, usage, body)


def cache_money_of(
    pricing: Pricing, model: str, usage: Usage, body: Mapping[str, object] | None
) -> CacheMoney:
    """`cache_money` from the diagnosis JSON's object (`CacheVerdict.diagnosis_body`)."""
    read, written = usage.cache_read_tokens, usage.cache_write_tokens
    saved = _read_saving(pricing, model, read)
    premium = _write_premium(pricing, model, usage) if written > 0 else 0.0
    cause, missing = _break(body, read) if body is not None else (None, 0)
    lost = _read_saving(pricing, model, missing) if missing else 0.0
    tokens, by_autopilot = (  # (0, 0.0) without a diagnosis or reads
        _autopilot_saving(pricing, model, body, read, saved)
        if body is not None and read > 0
        else (0, 0.0)
    )
    return CacheMoney(saved, premium, lost, cause if missing else None, tokens, by_autopilot)


def _write_premium(pricing: Pricing, model: str, usage: Usage) -> float:
    """What the call's writes cost over the input price. Without writes it is 0.0 (prices are
    never negative), so the caller skips the two pricings."""
    written = usage.cache_write_tokens
    writes = Usage(cache_write_tokens=written, cache_write_1h_tokens=usage.cache_write_1h_tokens)
    return pricing.cost_usd(model, writes) - pricing.uncached_cost_usd(model, writes)


def _autopilot_saving(
    pricing: Pricing, model: str, body: Mapping[str, object] | None, read: int, saved: float
) -> tuple[int, float]:
    """(tokens, dollars): a call that waited behind a fan-out's first write read the prefix
    instead of writing it (write - read price); a follow-up call whose prompt the autopilot
    edited (relocated values, canonical tool args) and whose prefix was kept read what the
    edit kept readable (input - read price: the do-no-harm rule would not have written it)."""
    autopilot = body.get("autopilot") if body is not None else None
    if not isinstance(autopilot, dict) or read <= 0:
        return 0, 0.0
    if autopilot.get("fanout_wait_ms") is not None:
        reads = Usage(cache_read_tokens=read)
        writes = Usage(cache_write_tokens=read)
        return read, pricing.cost_usd(model, writes) - pricing.cost_usd(model, reads)
    edited = autopilot.get("relocated") or autopilot.get("tool_args")
    if edited and body is not None and body.get("reason") == "kept":
        return read, saved
    return 0, 0.0


def _read_saving(pricing: Pricing, model: str, tokens: int) -> float:
    if tokens <= 0:
        return 0.0
    reads = Usage(cache_read_tokens=tokens)
    return pricing.uncached_cost_usd(model, reads) - pricing.cost_usd(model, reads)


def _break(body: Mapping[str, object] | None, read: int) -> tuple[str | None, int]:
    """(cause, cached tokens the call could not read) from the diagnosis and the actual reads."""
    if body is None:
        return None, 0
    reason, expected = str(body.get("reason")), _int(body.get("expected_prefix_tokens"))
    if reason in CAUSES:
        return CAUSES[reason], max(expected - read, 0)
    if reason == "kept":
        slack = EVICTION_SLACK_TOKENS + EVICTION_SLACK_RATIO * expected
        if expected - read > slack:
            return EVICTION, expected - read
    return None, 0


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) else 0


def with_autopilot_saving(diagnosis_json: str, money: CacheMoney) -> str:
    """The diagnosis JSON with what the autopilot saved on the call, for the ledger
    (`autopilot.saved_tokens`, `autopilot.saved_usd`)."""
    return saving_json(orjson.loads(diagnosis_json), money)


def saving_json(body: Mapping[str, object], money: CacheMoney) -> str:
    """`with_autopilot_saving` from the diagnosis JSON's object (left as it is)."""
    autopilot = body["autopilot"]
    assert isinstance(autopilot, Mapping)  # a saving comes only from the autopilot's part
    saved = {
        **autopilot,
        "saved_tokens": money.autopilot_saved_tokens,
        "saved_usd": round(money.autopilot_saved_usd, 9),
    }
    return orjson.dumps({**body, "autopilot": saved}).decode()
