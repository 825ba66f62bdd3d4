"""Print the project's runtime requirements for the image, one per line: without the bundled
engine's packages (torch, llguidance) unless `--engine=true` is given. Reads pyproject.toml only."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ENGINE_ONLY = {"torch", "llguidance"}


def main(argv: list[str]) -> int:
    with_engine = "--engine=true" in argv
    doc = tomllib.loads(Path("pyproject.toml").read_text())
    for req in doc["project"]["dependencies"]:
        name = re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0].lower()
        if with_engine or name not in ENGINE_ONLY:
            print(req)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
