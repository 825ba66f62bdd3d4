"""The SQL idempotency store on SQLite and on the real PostgreSQL."""

from __future__ import annotations

import sqlalchemy as sa

from sandbox.idempotency import IdempotencyStore, RunRecord, tool_runs
from tests.sandbox.conftest import ManualClock


def _store(engine: sa.Engine, clock: ManualClock) -> IdempotencyStore:
    return IdempotencyStore(engine, clock, lease_s=10, retention_s=100)


def test_first_claim_wins_and_the_rest_see_its_state(engine: sa.Engine, clock: ManualClock) -> None:
    store = _store(engine, clock)
    first = store.claim("acme", "k1", "fp", "t", "local")
    assert (first.kind, first.record.fence, first.record.state) == ("new", 1, "claimed")
    assert store.claim("acme", "k1", "fp", "t", "local").kind == "in_use"
    assert store.claim("acme", "k1", "other-fp", "t", "local").kind == "mismatch"
    assert store.claim("other", "k1", "fp", "t", "local").kind == "new"  # scoped by tenant
    assert store.claim("acme", "K1", "fp", "t", "local").kind == "new"  # case-sensitive
    assert store.mark_started(first.record.id, 1, "local")
    assert store.complete(first.record.id, 1, 200, '{"ok":1}')
    replay = store.claim("acme", "k1", "fp", "t", "local")
    assert (replay.kind, replay.record.http_status, replay.record.response) == (
        "replay",
        200,
        '{"ok":1}',
    )


def test_stale_lease_takeover_fences_out_the_old_owner(
    engine: sa.Engine, clock: ManualClock
) -> None:
    store = _store(engine, clock)
    old = store.claim("acme", "k", "fp", "t", "local").record
    clock.advance(11)
    stale = store.claim("acme", "k", "fp", "t", "local")
    assert (stale.kind, stale.record.state) == ("stale", "claimed")
    won = store.take_over(stale.record)
    assert won is not None and won.fence == 2
    assert store.take_over(stale.record) is None  # a second recoverer loses
    assert not store.mark_started(old.id, old.fence, "local")
    assert not store.complete(old.id, old.fence, 200, "late")
    assert not store.renew(old.id, old.fence)
    assert store.complete(won.id, won.fence, 200, "winner")
    assert store.get("acme", won.id).response == "winner"  # type: ignore[union-attr]
    assert not store.complete(won.id, won.fence, 200, "twice")  # done is final


def test_release_forgets_an_unstarted_claim(engine: sa.Engine, clock: ManualClock) -> None:
    store = _store(engine, clock)
    claim = store.claim("acme", "k", "fp", "t", "local").record
    assert not store.release(claim.id, claim.fence + 1)
    assert store.release(claim.id, claim.fence)
    assert store.claim("acme", "k", "corrected-fp", "t", "local").kind == "new"


def test_retention_expires_finished_rows_only(engine: sa.Engine, clock: ManualClock) -> None:
    store = _store(engine, clock)
    done = store.claim("acme", "done", "fp", "t", "local").record
    store.complete(done.id, done.fence, 200, "x")
    running = store.claim("acme", "running", "fp", "t", "local").record
    store.mark_started(running.id, running.fence, "local")
    clock.advance(101)
    assert store.sweep() == 1
    with engine.connect() as conn:
        keys = sorted(conn.execute(sa.select(tool_runs.c.idem_key)).scalars())
    assert keys == ["running"]
    again = store.claim("acme", "done", "fp", "t", "local")
    assert again.kind == "new" and again.record.id != done.id


def test_expired_row_is_replaced_on_claim_without_sweep(
    engine: sa.Engine, clock: ManualClock
) -> None:
    store = _store(engine, clock)
    done = store.claim("acme", "k", "fp", "t", "local").record
    store.complete(done.id, done.fence, 200, "x")
    clock.advance(100)
    assert store.claim("acme", "k", "new-fp", "t", "local").kind == "new"


def test_sweep_ends_runs_whose_owner_died_a_retention_ago(
    engine: sa.Engine, clock: ManualClock
) -> None:
    store = _store(engine, clock)
    dead: dict[str, RunRecord] = {}
    for key, runner in (("local", "local"), ("fargate", "fargate"), ("claimed", "local")):
        dead[key] = store.claim("acme", key, "fp", "t", runner).record
        if key != "claimed":
            assert store.mark_started(dead[key].id, 1, runner)
    alive = store.claim("acme", "alive", "fp", "t", "local").record
    assert store.mark_started(alive.id, 1, "local")
    other = store.claim("other", "local", "fp", "t", "local").record
    assert store.mark_started(other.id, 1, "local")
    clock.advance(109)  # the dead leases ran out 99 s ago: within the retention, kept
    assert store.renew(alive.id, 1)
    assert store.renew(other.id, 1)
    assert store.sweep() == 0
    clock.advance(1)  # a retention since the dead leases ran out
    assert store.sweep() == 3
    with engine.connect() as conn:
        rows = sorted(conn.execute(sa.select(tool_runs.c.tenant, tool_runs.c.idem_key)).all())
    assert [tuple(row) for row in rows] == [("acme", "alive"), ("other", "local")]
    assert not store.complete(dead["local"].id, 1, 200, "late")  # its owner wakes: no row
    again = store.claim("acme", "local", "fp", "t", "local")
    assert again.kind == "new" and again.record.id != dead["local"].id
