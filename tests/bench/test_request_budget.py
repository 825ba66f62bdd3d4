"""The request budget (bench/request_budget.py) sees work added to the request path: the check
that `make check` runs reports it over budget, by the exact number of calls added, and code
that every call newly runs by its distinct functions and their bytecode."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import pytest

from bench import request_budget as rb

pytestmark = pytest.mark.slow  # a gateway and an upstream process, ~10 s


def _extra_call(x: int) -> int:
    return x


def _distinct_functions(n: int) -> list[Callable[[int], int]]:
    """`n` functions with one body, each its own code object (as `n` new helpers would be)."""
    made: list[Callable[[int], int]] = []
    for i in range(n):
        scope: dict[str, Any] = {}
        source = (
            f"def helper_{i}(x):\n"
            "    y = x * 3 + 1\n"
            "    for k in (1, 2, 3):\n"
            "        y = (y ^ k) + len(str(y))\n"
            "    return y if y > x else x\n"
        )
        exec(source, scope)  # noqa: S102 - fixed text: a new code object per function
        made.append(scope[f"helper_{i}"])
    return made


@dataclass(frozen=True)
class Measured:
    before: dict[str, rb.Work]
    repeated: dict[str, rb.Work]  # `admit` calling one function 20 times more, 512 KB held
    distinct: dict[str, rb.Work]  # `admit` calling 20 different functions more


async def _measure_with_work_added() -> Measured:
    """The work of the calls, then again with more added to `admit`: one gateway for all."""
    async with rb.gateway() as gw:
        pipeline = gw.parts.pipeline
        admit = pipeline.admit

        def heavier(helpers: list[Callable[[int], int]], extra_bytes: int) -> Any:
            async def heavier_admit(call: Any) -> Any:  # one call more, and `helpers`
                for helper in helpers:
                    helper(7)
                scratch = bytearray(extra_bytes)  # held while admitting, then freed
                admitted = await admit(call)
                del scratch
                return admitted

            return heavier_admit

        before = await rb.measure_in(gw)
        pipeline.admit = heavier([_extra_call] * 20, 512 * 1024)
        repeated = await rb.measure_in(gw)
        pipeline.admit = heavier(_distinct_functions(20), 0)
        return Measured(before, repeated, await rb.measure_in(gw))


@pytest.fixture(scope="module")
def measured() -> Measured:
    return rb.run(_measure_with_work_added())


def _budget_of(work: dict[str, rb.Work]) -> dict[str, dict[str, int]]:
    return {kind: asdict(work[kind]) for kind in rb.KINDS}


def _flagged(work: dict[str, rb.Work], budget: dict[str, dict[str, int]]) -> list[str]:
    """The figures `make check` reports over budget, as "kind.figure"."""
    return [line.split(":")[0] for line in rb.over_budget(work, budget)]


def _each_kind(*figures: str) -> list[str]:
    return [f"{kind}.{figure}" for kind in rb.KINDS for figure in figures]


def test_work_added_to_every_call_is_over_budget(measured: Measured) -> None:
    before, after = measured.before, measured.repeated
    budget = _budget_of(before)

    assert rb.over_budget(before, budget) == []
    for kind in rb.KINDS:
        assert after[kind].num_calls == before[kind].num_calls + 21
        assert after[kind].num_functions == before[kind].num_functions + 2  # one is repeated
    assert _flagged(after, budget) == _each_kind("num_calls", "peak_bytes")


def test_new_code_on_every_call_is_over_budget_even_with_the_calls_allowed(
    measured: Measured,
) -> None:
    """The same 20 calls more, now of 20 different functions: with a budget that allows the
    calls, the breadth of code the call runs (cold after an idle gap) is still caught."""
    before, after = measured.before, measured.distinct
    budget = _budget_of(before)
    for kind in rb.KINDS:
        budget[kind]["num_calls"] = after[kind].num_calls
        budget[kind]["num_c_calls"] = after[kind].num_c_calls
        assert after[kind].num_functions == before[kind].num_functions + 21
        assert after[kind].code_bytes > before[kind].code_bytes + 20 * 40
    assert _flagged(after, budget) == _each_kind("num_functions", "code_bytes")


def test_the_committed_budget_names_every_figure() -> None:
    budget = rb.load_budget()
    for kind in rb.KINDS:
        assert set(budget[kind]) == set(rb.SLACK)
