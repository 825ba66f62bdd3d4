"""The tenant policies' last good files on disk (`var_dir/policy-last-good/<tenant>.yaml`, 0600
in a 0700 directory), so a restart with a broken policy file still serves the tenant.
Implements `policies.last_good.PolicyArchive`; written atomically (temp file, then rename).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


class DirectoryArchive:
    def __init__(self, directory: Path) -> None:
        self._dir = directory

    def save(self, tenant: str, data: bytes) -> None:
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self._dir / f"{tenant}.yaml"
        tmp = self._dir / f".{tenant}.yaml.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        tmp.replace(path)

    def load_all(self) -> Mapping[str, bytes]:
        if not self._dir.is_dir():
            return {}
        return {
            path.stem: path.read_bytes()
            for path in sorted(self._dir.glob("*.yaml"))
            if not path.name.startswith(".")
        }
