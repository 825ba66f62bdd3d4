"""8 sub-agents start at once on one 20,000-token prefix, through a real gateway with the default
policy, against the provider fake whose entries are readable only once prefilled: the prefix is
written once, every sub-agent gets its reply, and a first call that fails does not fail the rest.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.agent_sessions.fanout import NUM_AGENTS, FanoutBench

pytestmark = pytest.mark.slow

# 1 s to prefill the prefix, well above the fake's own CPU time for 8 such calls on a busy box;
# the provider serves nothing until every call has arrived (the first at the provider, the
# others waiting behind it), so "at once" holds on any box
PREFILL_S_PER_TOKEN = 5e-5


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FanoutBench]:
    running = FanoutBench(Path(tmp_path_factory.mktemp("fanout")), PREFILL_S_PER_TOKEN)
    try:
        yield running
    finally:
        running.close()


def test_the_prefix_is_written_once_and_read_by_the_other_seven(bench: FanoutBench) -> None:
    run = bench.run(gated=True, hold=True)
    assert [c.status for c in run.calls] == [200] * NUM_AGENTS
    billed = [(c.read, c.write, c.uncached) for c in run.billed]
    # the first writes the prefix and its task; the others read the prefix, write their task
    assert billed == [(0, 20_045, 3)] + [(20_023, 22, 3)] * 7
    assert run.num_head_writes == 1
    assert bench.gateway.components.pipeline.fanout.num_waited == 7
    assert len(bench.gateway.components.pipeline.fanout) == 0  # nothing held afterwards


def test_sent_all_at_once_each_call_writes_the_prefix(bench: FanoutBench) -> None:
    run = bench.run(gated=False, hold=True)  # the reference: nobody waits
    assert [c.status for c in run.calls] == [200] * NUM_AGENTS
    assert [(c.read, c.write, c.uncached) for c in run.billed] == [(0, 20_045, 3)] * 8
    assert run.num_head_writes == 8


def test_a_failing_first_call_lets_the_waiters_go_on_their_own(bench: FanoutBench) -> None:
    run = bench.run(gated=True, fail_first=True, hold=True)
    assert sorted(c.status for c in run.calls) == [200] * 7 + [502]
    # released at once, the seven go together: each writes (as without the gate)
    assert [(c.read, c.write, c.uncached) for c in run.billed] == [(0, 20_045, 3)] * 7
    assert len(bench.gateway.components.pipeline.fanout) == 0


def test_over_two_gateways_sharing_redis_the_prefix_is_written_once(
    tmp_path: Path, redis_url: str
) -> None:
    bench = FanoutBench(tmp_path, PREFILL_S_PER_TOKEN, redis_url, num_gateways=2)
    try:
        run = bench.run(gated=True, hold=True)  # sub-agents 0, 2, 4, 6 to one, the rest to other
        assert [c.status for c in run.calls] == [200] * NUM_AGENTS
        assert [(c.read, c.write, c.uncached) for c in run.billed] == [(0, 20_045, 3)] + [
            (20_023, 22, 3)
        ] * 7
        gates = [g.components.pipeline.fanout for g in bench.gateways]
        assert [g.num_waited for g in gates] in ([3, 4], [4, 3])  # both gateways waited
        assert [len(g) for g in gates] == [0, 0]
        failed = bench.run(gated=True, fail_first=True, hold=True)
        assert sorted(c.status for c in failed.calls) == [200] * 7 + [502]
        assert [(c.read, c.write) for c in failed.billed] == [(0, 20_045)] * 7
    finally:
        bench.close()
