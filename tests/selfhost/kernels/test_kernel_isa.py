"""Which build of the CPU kernels an engine gets: the best this CPU runs, none (and no compile
attempt) where it runs neither, and a clear error for an unknown one."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.utils.cpp_extension

from selfhost.kernels.cpu import loader as cpu_kernels_module


def _fake_cpu(monkeypatch: pytest.MonkeyPatch, avx512_bf16: bool, avx2: bool) -> None:
    monkeypatch.setattr(torch.cpu, "_is_avx512_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_avx2_supported", lambda: avx2)


@pytest.mark.parametrize(
    ("avx512_bf16", "avx2", "isas"),
    [(True, True, ["avx512_bf16", "avx2"]), (False, True, ["avx2"]), (False, False, [])],
)
def test_supported_isas_best_first(
    monkeypatch: pytest.MonkeyPatch, avx512_bf16: bool, avx2: bool, isas: list[str]
) -> None:
    _fake_cpu(monkeypatch, avx512_bf16, avx2)
    assert cpu_kernels_module.supported_isas() == isas
    assert cpu_kernels_module.best_isa() == (isas[0] if isas else None)


def test_a_cpu_without_either_isa_gets_the_reference_path_without_compiling(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _fake_cpu(monkeypatch, avx512_bf16=False, avx2=False)

    def no_compile(*args: object, **kwargs: object) -> None:
        raise AssertionError("tried to compile kernels this CPU cannot run")

    monkeypatch.setattr(torch.utils.cpp_extension, "load", no_compile)
    with caplog.at_level(logging.WARNING, logger="selfhost.kernels.cpu.loader"):
        assert cpu_kernels_module.load_cpu_kernels() is None
        assert cpu_kernels_module.load_cpu_kernels(isa="avx2") is None
    assert [r.getMessage() for r in caplog.records] == [
        "CPU fast path off: this CPU has neither AVX512-BF16 nor AVX2 (torch path)"
    ] * 2


def test_an_avx2_cpu_is_not_offered_the_avx512_build(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cpu(monkeypatch, avx512_bf16=False, avx2=True)
    monkeypatch.setattr(torch.utils.cpp_extension, "load", lambda *a, **k: pytest.fail("built"))
    assert cpu_kernels_module.load_cpu_kernels(isa="avx512_bf16") is None


def test_an_unknown_isa_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown kernel ISA 'sse2'"):
        cpu_kernels_module.load_cpu_kernels(isa="sse2")


def test_each_build_names_its_own_sources() -> None:
    sources = cpu_kernels_module.SOURCES
    assert set(sources) == {"avx512_bf16", "avx2"}
    for names in sources.values():
        for name in names:
            assert (cpu_kernels_module.CSRC / name).is_file()
    assert "cpu_linear.cpp" in sources["avx512_bf16"] and "linear_avx2.cpp" in sources["avx2"]
