"""Session affinity shared by gateway processes through the real Redis: a session placed by one
process is kept there by another whose own view would place it elsewhere; a move is fenced by a
compare-and-set; and with Redis cut (a TCP proxy, never the shared server) each process routes on
its own view, on purpose, logged and counted, and shares again once Redis is back."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterator

import pytest
import redis
from prometheus_client import CollectorRegistry

from adapters.types import Usage
from gateway.fleet.affinity_store import Placement, RedisAffinity
from gateway.fleet.routing_port import Fleet, ReplicaSpec
from gateway.fleet.sharing import FleetSharing
from gateway.ports import Candidate, ModelRoute
from policies.model import TenantPolicy
from policies.routing import RoutingPolicy
from tests.fakes.tcp_cut import TcpCut
from tests.quotas.conftest import delete_prefix
from tests.routing.test_router_fleet import Clock, ProbeBackend, chain, prepared

pytestmark = pytest.mark.redis
A, B = "local@http://a", "local@http://b"
ROUTE = ModelRoute(
    "smollm2",
    tuple(Candidate(ProbeBackend(u), "local", "selfhost", f"http://{u}") for u in "ab"),  # type: ignore[arg-type]
)
TENANT = TenantPolicy(tenant="acme", routing=RoutingPolicy(venue="selfhost_only"))


@pytest.fixture
def prefix(redis_url: str, redis_prefix: str) -> Iterator[str]:
    yield redis_prefix
    delete_prefix(redis_url, redis_prefix)


def gateway(url: str, prefix: str, clock: Clock) -> tuple[Fleet, FleetSharing, CollectorRegistry]:
    """One gateway process's fleet, sharing through `url` (its subscriber not started)."""
    spec = ReplicaSpec(prefill_tok_s=1000.0, kv_capacity_blocks=1000)
    fleet = Fleet([ROUTE], clock=clock, rng=random.Random(1), specs={"local": spec})
    registry = CollectorRegistry()
    sharing = FleetSharing.from_url(
        url,
        sessions=fleet.registry.sessions,
        index=lambda: fleet.index,
        clock=clock,
        key_prefix=prefix,
        session_ttl_s=60.0,
        registry=registry,
    )
    fleet.share(sharing)
    return fleet, sharing, registry


async def call(fleet: Fleet, session: str, tag: str, blocks: int = 30) -> str:
    """One call of `session` through `fleet`: recall, plan, dispatch, complete; its replica."""
    h = chain(tag, blocks)
    await fleet.recall("acme", session)
    plan = fleet.plan(ROUTE, TENANT, session, prepared(h), blocks * 16, 16)
    attempt = plan.attempts[0]
    fleet.on_dispatch(attempt, session, prepared(h))
    fleet.on_complete(attempt, Usage(blocks * 16, 16), ok=True)
    assert fleet.sharing is not None
    await fleet.sharing.affinity.flush()
    await fleet.sharing.feed.flush()
    return str(plan.details["replica"])


def busy(fleet: Fleet, replica: str, n: int) -> None:
    """`n` calls of other sessions in flight on `replica` in this process's view only."""
    cand = next(c for c in ROUTE.candidates if c.replica and replica.endswith(c.replica))
    from gateway.ports import Attempt

    for i in range(n):
        fleet.registry.planned[f"busy{i}"] = (480, 16)
        fleet.book.on_dispatch(Attempt(cand, "busy"), f"busy{i}", prepared(chain(f"x{i}", 30)))


async def until(predicate: Callable[[], bool]) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the shared state never arrived")


def test_a_session_placed_by_one_process_stays_there_through_another(
    redis_url: str, prefix: str
) -> None:
    """Affinity alone (no index feed): process two keeps the session where one placed it
    although its own view sends a new session elsewhere."""

    async def main() -> tuple[str, str, str]:
        clock = Clock()
        one, s1, _ = gateway(redis_url, prefix, clock)
        two, s2, _ = gateway(redis_url, prefix, clock)
        first = await call(one, "sess", "sess")
        busy(two, first, 1)  # process two alone would send a new session elsewhere
        fresh = await call(two, "new-session", "new")
        second = await call(two, "sess", "sess", 32)  # the session's next call, via two
        for s in (s1, s2):
            await s.stop()
        return first, fresh, second

    first, fresh, second = asyncio.run(main())
    assert fresh != first
    assert second == first


def test_the_index_feed_brings_one_process_blocks_into_the_other(
    redis_url: str, prefix: str
) -> None:
    """A fork of a session (same head, new session id) placed by process two goes where process
    one sent the parent, because the feed told two's index what that replica holds."""

    async def main() -> tuple[str, str, int, int]:
        clock = Clock()
        one, s1, _ = gateway(redis_url, prefix, clock)
        two, s2, _ = gateway(redis_url, prefix, clock)
        for s in (s1, s2):
            s.start()
        await until(lambda: s1.feed.is_subscribed and s2.feed.is_subscribed)
        first = await call(one, "parent", "head")
        await until(lambda: two.index.matched_blocks(first, chain("head", 30)) == 30)
        fork = await call(two, "fork", "head", 34)
        await until(lambda: s1.feed.num_applied == 1)
        for s in (s1, s2):
            await s.stop()
        return first, fork, s2.feed.num_applied, s1.feed.num_applied

    first, fork, applied_two, applied_one = asyncio.run(main())
    assert fork == first
    # two applied one's dispatch; one applied two's (its own are skipped)
    assert (applied_two, applied_one) == (1, 1)


def test_a_move_is_a_compare_and_set_on_the_version_read(redis_url: str, prefix: str) -> None:
    async def main() -> list[tuple[bool, int, str | None]]:
        store = RedisAffinity.from_url(redis_url, key_prefix=prefix, ttl_s=60.0)
        at_a, at_b = Placement("selfhost", "local", A), Placement("selfhost", "local", B)
        out = []
        for placement, expected in ((at_a, 0), (at_a, 0), (at_b, 1), (at_a, 1), (at_b, 1)):
            r = await store.commit(
                "acme", "s", placement, expected_version=expected, cached_tokens=10, seen_ms=5
            )
            out.append((r.won, r.entry.version, r.entry.placement.replica))
        ttl_ms = await store.redis.pttl(store.key("acme", "s"))
        out.append((0 < ttl_ms <= 60_000, 0, None))
        await store.aclose()
        return out

    assert asyncio.run(main()) == [
        (True, 1, A),  # created
        (True, 1, A),  # same placement: a refresh, the version stays
        (True, 2, B),  # a move from the version read
        (False, 2, B),  # a move from a stale version loses to the one made since
        (True, 2, B),  # the loser following the winner is a refresh
        (True, 0, None),  # every key has its TTL
    ]


def test_the_loser_of_a_race_follows_the_winner(
    redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> tuple[str | None, int]:
        clock = Clock()
        one, s1, _ = gateway(redis_url, prefix, clock)
        two, s2, _ = gateway(redis_url, prefix, clock)
        await one.recall("acme", "s")
        await two.recall("acme", "s")  # both read "no entry"
        # each process places the session on a different replica
        one.registry.planned["s"] = two.registry.planned["s"] = (160, 16)
        a, b = ROUTE.candidates
        from gateway.ports import Attempt

        one.on_dispatch(Attempt(a, "x"), "s", prepared(chain("s", 10)))
        await s1.affinity.flush()
        two.on_dispatch(Attempt(b, "x"), "s", prepared(chain("s", 10)))
        await s2.affinity.flush()
        entry = two.registry.sessions.get("s")
        lost = s2.affinity.num_lost_moves
        for s in (s1, s2):
            await s.stop()
        return (entry.replica if entry else None), lost

    with caplog.at_level(logging.INFO, "lantern.fleet.affinity"):
        replica, lost = asyncio.run(main())
    assert (replica, lost) == (A, 1)
    assert "session s: move to selfhost|local|local@http://b lost to" in caplog.text


def test_with_redis_cut_each_process_routes_on_its_own_view(
    redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = redis.connection.parse_url(redis_url)
    proxy = TcpCut((url.get("host", "127.0.0.1"), int(url.get("port", 6379))))
    proxy.restore()

    async def main() -> tuple[list[str], float, float, float, int]:
        clock = Clock()
        one, s1, reg = gateway(f"redis://127.0.0.1:{proxy.port}/0", prefix, clock)
        first = await call(one, "sess", "sess")
        proxy.cut()
        during = await call(one, "sess", "sess", 31)  # the local table keeps it in place
        down = reg.get_sample_value("lantern_fleet_shared_store_down")
        fallbacks = reg.get_sample_value("lantern_fleet_shared_fallbacks_total", {"op": "recall"})
        proxy.restore()
        clock.now += 2.0  # past the retry interval
        after = await call(one, "sess", "sess", 32)
        up = reg.get_sample_value("lantern_fleet_shared_store_down")
        shared = await s1.affinity.store.fetch("acme", "sess")
        await s1.stop()
        version = shared.version if shared else -1
        return [first, during, after], down or 0.0, fallbacks or 0.0, up or 0.0, version

    with caplog.at_level(logging.WARNING, "lantern.fleet.shared"):
        try:
            replicas, down, fallbacks, up, version = asyncio.run(main())
        finally:
            proxy.cut()
    assert len(set(replicas)) == 1
    assert (down, fallbacks, up, version) == (1.0, 1.0, 0.0, 1)
    assert "shared fleet store unreachable (recall" in caplog.text
    assert "shared fleet store back after" in caplog.text
