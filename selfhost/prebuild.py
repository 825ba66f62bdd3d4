"""`python -m selfhost.prebuild`: compile the CPU kernels once, at install time (`make install`),
so that the first engine start does not spend its first minute in g++, nor the test suite two
(it tests every build this CPU runs: an AVX512-BF16 machine tests the AVX2 build too). Never
fails the install: where the kernels cannot be built, the engine runs its torch path and says
so."""

from __future__ import annotations

import logging
import sys

from selfhost.kernels.cpu.loader import load_cpu_kernels, supported_isas


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    kernels = load_cpu_kernels()  # the best build: the one the engine runs
    print("selfhost CPU kernels:", "built" if kernels is not None else "unavailable (torch path)")
    if kernels is not None:
        for isa in supported_isas()[1:]:  # the others the tests run
            built = load_cpu_kernels(isa=isa) is not None
            print(f"selfhost CPU kernels ({isa}):", "built" if built else "unavailable")
    return 0


if __name__ == "__main__":
    sys.exit(main())
