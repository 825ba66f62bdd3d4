"""The request budget (bench/request_budget.py) sees work added to the request path: the check
that `make check` runs reports it over budget, by the exact number of calls added."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest

from bench import request_budget as rb

pytestmark = pytest.mark.slow  # a gateway and an upstream process, ~25 s


def _extra_call() -> None:
    pass


async def _measured_before_and_after(extra_calls: int, extra_bytes: int) -> Any:
    async with rb.gateway() as gw:
        before = await rb.measure_in(gw)
        pipeline = gw.parts.pipeline
        admit = pipeline.admit

        async def heavier_admit(call: Any) -> Any:  # one call more, and `extra_calls`
            for _ in range(extra_calls):
                _extra_call()
            scratch = bytearray(extra_bytes)  # held while admitting, then freed
            admitted = await admit(call)
            del scratch
            return admitted

        pipeline.admit = heavier_admit
        return before, await rb.measure_in(gw)


def test_work_added_to_every_call_is_over_budget() -> None:
    before, after = rb.run(_measured_before_and_after(extra_calls=20, extra_bytes=512 * 1024))
    budget = {kind: asdict(before[kind]) for kind in rb.KINDS}

    assert rb.over_budget(before, budget) == []
    for kind in rb.KINDS:
        assert after[kind].num_calls == before[kind].num_calls + 21
    problems = rb.over_budget(after, budget)
    assert [line.split(":")[0] for line in problems] == [
        "non_stream.num_calls",
        "non_stream.peak_bytes",
        "stream.num_calls",
        "stream.peak_bytes",
    ]


def test_the_committed_budget_names_every_figure() -> None:
    budget = rb.load_budget()
    for kind in rb.KINDS:
        assert set(budget[kind]) == set(rb.SLACK)
