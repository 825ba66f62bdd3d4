"""Prices from LiteLLM's bundled cost map: exact costs, derived cache prices, unknown models."""

from __future__ import annotations

from decimal import Decimal

import pytest

from adapters.pricing import (
    Price,
    PriceBook,
    UnknownPrice,
    cost,
    cost_decimal,
    uncached_cost,
    uncached_cost_decimal,
    worst_case_cost,
)
from adapters.types import Usage


@pytest.fixture(scope="module")
def book() -> PriceBook:
    return PriceBook.from_litellm(
        {
            "my-finetune": Price(
                Decimal("0.000001"),
                Decimal("0.000002"),
                Decimal("0.0000001"),
                Decimal("0.00000125"),
                Decimal("0.000002"),
            )
        }
    )


def test_gpt_4o_mini_from_the_local_map(book: PriceBook) -> None:
    price = book.price_for("gpt-4o-mini")
    assert price == Price(
        Decimal("1.5E-7"),
        Decimal("6E-7"),
        Decimal("7.5E-8"),
        Decimal("1.875E-7"),
        Decimal("3E-7"),
        Decimal("0.025"),  # the map's search_context_cost_per_query
    )  # no write prices in the map: 1.25 x input (5 minutes), 2 x input (1 hour)
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, cache_read_tokens=2_000_000)
    assert cost_decimal(usage, price) == Decimal("0.90")
    assert cost(usage, price) == 0.9
    assert uncached_cost_decimal(usage, price) == Decimal("1.05")
    assert book.price_for("openai/gpt-4o-mini") == price


def test_claude_with_cache_prices(book: PriceBook) -> None:
    price = book.price_for("anthropic/claude-sonnet-4-5")
    assert price == Price(
        Decimal("3E-6"),
        Decimal("0.000015"),
        Decimal("3E-7"),
        Decimal("0.00000375"),
        Decimal("6E-6"),
    )  # the 1 h write price from the map's cache_creation_input_token_cost_above_1hr
    usage = Usage(
        input_tokens=100_000,
        output_tokens=20_000,
        cache_read_tokens=400_000,
        cache_write_tokens=50_000,
    )
    assert cost_decimal(usage, price) == Decimal("0.9075")
    assert round(cost(usage, price), 2) == 0.91
    assert uncached_cost(usage, price) == 1.95
    assert uncached_cost_decimal(usage, price) - cost_decimal(usage, price) == Decimal("1.0425")


def test_overrides_win_and_unknown_models_raise(book: PriceBook) -> None:
    assert book.price_for("my-finetune").cache_write == Decimal("0.00000125")
    with pytest.raises(UnknownPrice) as info:
        book.price_for("no-such-model-xyz")
    assert info.value.model == "no-such-model-xyz"
    assert book.has_price("gpt-4o") and not book.has_price("vendor/no-such-model-xyz")


def test_missing_cache_prices_are_derived() -> None:
    book = PriceBook(
        {
            "m": {"input_cost_per_token": 2e-06, "output_cost_per_token": 8e-06},
            "image-only": {"output_cost_per_image": 0.04},
        }
    )
    assert book.price_for("m") == Price(
        Decimal("0.000002"),
        Decimal("0.000008"),
        Decimal("2E-7"),
        Decimal("0.0000025"),
        Decimal("0.000004"),
    )
    with pytest.raises(UnknownPrice):
        book.price_for("image-only")


def test_one_hour_writes_cost_the_one_hour_rate(book: PriceBook) -> None:
    price = book.price_for("claude-sonnet-4-5")
    usage = Usage(100, 10, 0, 1000, cache_write_1h_tokens=600)
    # 100 x $3 + 10 x $15 + 400 x $3.75 + 600 x $6, per Mtok
    assert cost_decimal(usage, price) == Decimal("0.00555")


def test_worst_case_holds_the_write_premium_of_the_ttl(book: PriceBook) -> None:
    price = book.price_for("claude-sonnet-4-5")
    assert worst_case_cost(1000, 100, price, "5m") == 0.00525  # 1000 x 3.75 + 100 x 15
    assert worst_case_cost(1000, 100, price, "1h") == 0.0075  # 1000 x 6 + 100 x 15
    every_write = Usage(0, 100, 0, 1000, cache_write_1h_tokens=1000)
    assert cost(every_write, price) == worst_case_cost(1000, 100, price, "1h")


def test_the_cost_map_is_litellms_own_without_importing_litellm() -> None:
    """The file read directly prices every model as LiteLLM's loaded map does, aliases too."""
    from adapters.pricing import bundled_cost_map, import_litellm_offline

    ours = bundled_cost_map()
    theirs = import_litellm_offline().model_cost
    fields = (
        "input_cost_per_token",
        "output_cost_per_token",
        "cache_read_input_token_cost",
        "cache_creation_input_token_cost",
        "cache_creation_input_token_cost_above_1hr",
    )
    assert set(theirs) <= set(ours)
    assert [k for k in theirs if any(ours[k].get(f) != theirs[k].get(f) for f in fields)] == []
    assert any("alias_of" in e for e in ours.values()) is False  # every alias resolved


def test_web_searches_cost_per_search(book: PriceBook) -> None:
    """Anthropic bills a server-side web search at $10 per 1,000, on top of the tokens: the
    cost map's `search_context_cost_per_query` where it names one, else that price."""
    mapped = book.price_for("claude-sonnet-4-5")
    unmapped = book.price_for("my-finetune")
    assert (mapped.web_search, unmapped.web_search) == (Decimal("0.01"), Decimal("0.01"))
    usage = Usage(100, 10, web_search_requests=3)
    # 100 x $3 + 10 x $15 per Mtok, and 3 searches at a cent
    assert cost_decimal(usage, mapped) == Decimal("0.03045")
    assert uncached_cost_decimal(usage, mapped) == Decimal("0.03045")  # nothing cached: same
    searched = PriceBook(
        {
            "m": {
                "input_cost_per_token": 1e-06,
                "output_cost_per_token": 2e-06,
                "search_context_cost_per_query": {"search_context_size_medium": 0.025},
            }
        }
    ).price_for("m")
    assert cost_decimal(Usage(web_search_requests=2), searched) == Decimal("0.050")
