"""Fail when a package module passes 500 lines (STYLE.md: split by concept past 500)."""

from __future__ import annotations

import subprocess
import sys

LIMIT = 500
PACKAGES = ("gateway/", "cachekeys/", "quotas/", "sandbox/", "policies/", "adapters/", "selfhost/")


def main() -> int:
    files = subprocess.run(["git", "ls-files", "*.py"], capture_output=True, text=True, check=True)
    too_big = []
    for path in files.stdout.split():
        if path.startswith(PACKAGES):
            with open(path, encoding="utf-8") as handle:
                count = sum(1 for _ in handle)
            if count > LIMIT:
                too_big.append(f"{path}: {count} lines (limit {LIMIT})")
    for line in too_big:
        print(line)
    return 1 if too_big else 0


if __name__ == "__main__":
    sys.exit(main())
