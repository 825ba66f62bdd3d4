"""Lantern as built from another commit (the previous release, or any ref), served beside
today's build in the same benchmark run: a temporary git worktree of that commit, run with this
checkout's virtual environment, so only Lantern's own code differs between the two.

    with previous_build("4adc3e8", tmp) as tree:
        proc, base_url = start_previous(tree, config)
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench._procs import PY, ROOT, free_port, start


@contextmanager
def previous_build(ref: str, parent: Path) -> Iterator[Path]:
    """A detached worktree of `ref` under `parent`, removed afterwards."""
    tree = parent / f"lantern-{ref}"
    git = ["git", "-C", str(ROOT)]
    subprocess.run([*git, "worktree", "add", "--detach", "-q", str(tree), ref], check=True)
    try:
        yield tree
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=False)


def start_previous(
    tree: Path, config: Path, cores: frozenset[int] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """`lantern serve` of the build in `tree` with `config`, from `tree` so that its own modules
    are imported (its CLI moved from gateway/cli.py to a package); the process and its `/v1`."""
    cli = "gateway.cli.main" if (tree / "gateway" / "cli" / "main.py").exists() else "gateway.cli"
    port = free_port()
    argv = [PY, "-m", cli, "serve", "--config", str(config), "--port", str(port)]
    health = f"http://127.0.0.1:{port}/healthz"
    proc = start(argv, health, log=config.parent / "gw.log", cwd=tree, cores=cores)
    return proc, f"http://127.0.0.1:{port}/v1"
