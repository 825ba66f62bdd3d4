"""bench/cold_cost.py's arithmetic on cachegrind's output: the run without calls is taken off,
the eviction's memcpy is left out, and what remains is divided by the calls."""

from __future__ import annotations

from pathlib import Path

from bench.cold_cost import cold_call

HEADER = "desc: I1 cache: 32768 B\ncmd: python\nevents: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw\n"


def _write(path: Path, eval_counts: str, memcpy_counts: str) -> Path:
    path.write_text(
        HEADER
        + "fl=/build/Python/ceval.c\nfn=_PyEval_EvalFrameDefault\n"
        + f"10 {eval_counts}\n"
        + "fl=./string/memmove-vec-unaligned-erms.S\nfn=__memcpy_avx_unaligned_erms\n"
        + f"5 {memcpy_counts}\n"
        + "summary: 0\n"
    )
    return path


def test_one_cold_call_is_the_difference_over_the_calls(tmp_path: Path) -> None:
    without = _write(tmp_path / "0.out", "1000 10 4 500 20 8 100 2 1", "50 0 0 10 5 5 10 5 5")
    with_calls = _write(
        tmp_path / "4.out", "5000 90 44 2500 220 408 900 22 9", "9000 0 0 4000 4000 4000 0 0 0"
    )

    call = cold_call(with_calls, without, calls=4)

    assert call.instructions == 1000  # (5000 - 1000) / 4: the eviction's copy left out
    assert call.ll_instruction_misses == 10  # (44 - 4) / 4
    assert call.ll_data_read_misses == 100  # (408 - 8) / 4
    assert call.by_function == {"ceval.c:_PyEval_EvalFrameDefault": (100, 10)}
