"""The pure routing decision's venue, fleet or API: overflow to the cheapest API, the TTFT
bound, hysteresis, a warm provider kept, selfhost_only, and the session entry it leaves."""

from __future__ import annotations

import pytest

from policies.routing import RoutingPolicy
from routing.decision import session_after
from routing.types import (
    ApiState,
    Prices,
    SessionEntry,
    SessionTable,
    TokenPrices,
)
from tests.routing.snapshots import MODEL, chain, decide, features, index_with, replica

PRICES = Prices(
    api={
        "bedrock": TokenPrices(
            3.0, 15.0, cache_read_usd_per_mtok=0.3, cache_write_usd_per_mtok=3.75
        ),
        "openai": TokenPrices(2.5, 10.0, cache_read_usd_per_mtok=1.25),
    }
)


APIS = (ApiState("bedrock", MODEL), ApiState("openai", MODEL))


def test_new_session_fills_fleet_then_overflows_to_cheapest_api() -> None:
    cheap = RoutingPolicy(venue="cheapest", headroom_util=0.65)
    d = decide([replica("a", utilisation=0.64)], apis=APIS, prices=PRICES, policy=cheap)
    assert (d.venue, d.backend) == ("selfhost", "a")
    d = decide([replica("a", utilisation=0.65)], apis=APIS, prices=PRICES, policy=cheap)
    assert (d.venue, d.backend, d.reason) == ("api", "openai", "overflow_headroom:api_cheapest")
    # openai: 1600 x 2.5 + 100 x 10 = 5000 $/Mtok-units; bedrock: 1600 x 3.75 + 1500
    assert {s.backend: s.predicted_usd for s in d.scores if s.venue == "api"} == pytest.approx(
        {"openai": 0.005, "bedrock": 0.0075}
    )
    assert [s.backend for s in d.fallbacks] == ["bedrock", "a"]


def test_ttft_bound_also_gates_new_sessions() -> None:
    cheap = RoutingPolicy(venue="cheapest", ttft_slo_s=1.0)
    d = decide([replica("a")], apis=APIS, prices=PRICES, policy=cheap)  # 1.65 s > 1 s
    assert d.venue == "api"


def test_fleet_session_stays_past_headroom_until_the_ttft_bound() -> None:
    h = chain("s", 100)
    idx = index_with({"a": h})
    table = SessionTable({"s1": SessionEntry("s1", "selfhost", "a", "a", 99.0, 1600)})
    cheap = RoutingPolicy(venue="cheapest", ttft_slo_s=2.0)
    d = decide(
        [replica("a", utilisation=0.9)],
        f=features(hashes=h),
        idx=idx,
        apis=APIS,
        prices=PRICES,
        table=table,
        policy=cheap,
    )
    assert (d.backend, d.reason) == ("a", "sticky")
    d = decide(
        [replica("a", utilisation=0.9, inflight_tokens=5000)],
        f=features(hashes=h),
        idx=idx,
        apis=APIS,
        prices=PRICES,
        table=table,
        policy=cheap,
    )
    assert (d.venue, d.reason) == ("api", "overflow_ttft_slo:api_cheapest")


def test_api_session_returns_to_fleet_only_below_the_hysteresis_band() -> None:
    table = SessionTable({"s1": SessionEntry("s1", "api", "bedrock", None, 99.0, 1500)})
    cheap = RoutingPolicy(venue="cheapest", headroom_util=0.65, venue_hysteresis=0.15)
    d = decide(
        [replica("a", utilisation=0.55)], apis=APIS, prices=PRICES, table=table, policy=cheap
    )
    assert (d.venue, d.backend, d.reason) == ("api", "bedrock", "provider_warm")
    d = decide(
        [replica("a", utilisation=0.45)], apis=APIS, prices=PRICES, table=table, policy=cheap
    )
    assert (d.venue, d.reason) == ("selfhost", "return_to_fleet:least_ttft")


def test_warm_provider_kept_unless_another_is_cheaper_by_the_margin() -> None:
    table = SessionTable({"s1": SessionEntry("s1", "api", "bedrock", None, 99.0, 1500)})
    # bedrock warm: 1500 x 0.3 + 100 x 3.75 + 100 x 15 = 2325 -> $0.002325; openai cold $0.005
    d = decide([], apis=APIS, prices=PRICES, table=table, policy=RoutingPolicy(venue="api_only"))
    assert (d.backend, d.reason, d.predicted_cached_tokens) == ("bedrock", "provider_warm", 1500)
    pricey = Prices(
        api={"bedrock": TokenPrices(30.0, 150.0, 3.0, 37.5), "openai": PRICES.api["openai"]}
    )
    d = decide([], apis=APIS, prices=pricey, table=table, policy=RoutingPolicy(venue="api_only"))
    assert (d.backend, d.reason) == ("openai", "provider_cheaper")
    # openai 0.005 vs bedrock warm 0.00555: cheaper, but not by 10 %
    close = Prices(
        api={"bedrock": TokenPrices(3.0, 47.25, 0.3, 3.75), "openai": PRICES.api["openai"]}
    )
    d = decide([], apis=APIS, prices=close, table=table, policy=RoutingPolicy(venue="api_only"))
    assert (d.backend, d.reason) == ("bedrock", "provider_warm")


def test_selfhost_only_never_uses_an_api_even_when_full() -> None:
    d = decide(
        [replica("a", utilisation=1.0, inflight_tokens=10**6)],
        apis=APIS,
        prices=PRICES,
        policy=RoutingPolicy(venue="selfhost_only"),
    )
    assert d.venue == "selfhost" and d.fallbacks == ()


def test_session_after_records_prompt_and_answer() -> None:
    e = session_after("s1", "api", "bedrock", None, 5.0, 1000, 200)
    assert e == SessionEntry("s1", "api", "bedrock", None, 5.0, 1200)
