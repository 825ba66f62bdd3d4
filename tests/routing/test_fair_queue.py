"""Weighted fair order among tenants waiting for a slot (routing/fair_queue.py)."""

from __future__ import annotations

from routing.fair_queue import FairQueue


def drain(q: FairQueue[str]) -> list[str]:
    out = []
    while (got := q.pop()) is not None:
        out.append(got[1])
    return out


def test_a_backlog_does_not_hold_back_another_tenant() -> None:
    q: FairQueue[str] = FairQueue()
    for i in range(6):
        q.push("acme", f"a{i}")
    q.push("globex", "g0")
    q.push("globex", "g1")
    assert q.ahead("globex", "g0") == 1  # acme's first only
    assert drain(q) == ["a0", "g0", "a1", "g1", "a2", "a3", "a4", "a5"]
    assert q.num_tenants == 0 and len(q) == 0


def test_weights_share_the_slots_in_proportion() -> None:
    q: FairQueue[str] = FairQueue()
    for i in range(6):
        q.push("acme", f"a{i}", weight=2.0)
    for i in range(3):
        q.push("globex", f"g{i}", weight=1.0)
    assert drain(q) == ["a0", "g0", "a1", "a2", "g1", "a3", "a4", "g2", "a5"]


def test_a_late_arrival_goes_next_not_behind_the_backlog() -> None:
    q: FairQueue[str] = FairQueue()
    for i in range(10):
        q.push("acme", f"a{i}")
    assert [q.pop(), q.pop(), q.pop()] == [("acme", "a0"), ("acme", "a1"), ("acme", "a2")]
    q.push("globex", "g0")
    q.push("initech", "i0")
    assert q.ahead("globex", "g0") == 0 and q.ahead("initech", "i0") == 1
    assert drain(q)[:4] == ["g0", "i0", "a3", "a4"]


def test_full_lanes_refuse_and_removal_keeps_the_table_bounded() -> None:
    q: FairQueue[str] = FairQueue(max_per_tenant=2)
    assert q.push("acme", "a0") and q.push("acme", "a1")
    assert not q.push("acme", "a2")
    assert q.push("globex", "g0")
    assert q.remove("acme", "a0") and not q.remove("acme", "a0")
    assert q.ahead("acme", "a0") == -1 and q.ahead("acme", "a1") == 1
    assert q.remove("globex", "g0") and q.num_tenants == 1
    assert q.remove("acme", "a1") and q.num_tenants == 0 and len(q) == 0
    assert q.pop() is None
