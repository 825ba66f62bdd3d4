"""`python -m selfhost.prebuild`: compile the CPU kernels once, at install time (`make install`),
so that the first engine start does not spend its first minute in g++. Never fails the install:
where the kernels cannot be built, the engine runs its torch path and says so."""

from __future__ import annotations

import logging
import sys

from selfhost.kernels.cpu.loader import load_cpu_kernels


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    kernels = load_cpu_kernels()
    print("selfhost CPU kernels:", "built" if kernels is not None else "unavailable (torch path)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
