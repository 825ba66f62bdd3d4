"""Fixtures for the sandbox tests: a probed local runner, SQL engines, a settable clock."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sandbox.cgroups import CgroupTree
from sandbox.errors import SandboxUnavailable
from sandbox.idempotency import create_store_engine, create_tables
from sandbox.local_runner import LocalRunner


class ManualClock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def log() -> logging.Logger:
    return logging.getLogger("lantern.test.sandbox")


@pytest.fixture(scope="session", params=["bwrap", "unshare"])
def sandbox_backend(request: pytest.FixtureRequest) -> str:
    """Each namespace backend this machine offers. bwrap is the default the project installs,
    so with CI=true its absence fails; the `unshare` fallback is exercised where it works."""
    runner = LocalRunner(logging.getLogger("probe"), backend=request.param)
    try:
        return runner.backend()
    except SandboxUnavailable as exc:
        if request.param == "bwrap" and os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(f"bubblewrap with user namespaces is required in CI: {exc}")
        pytest.skip(f"{request.param}: {exc}")
    finally:
        runner.close()


@pytest.fixture(scope="session")
def default_backend() -> str:
    """The backend LocalRunner picks by itself ('auto'); CI=true requires one."""
    runner = LocalRunner(logging.getLogger("probe"))
    try:
        return runner.backend()
    except SandboxUnavailable as exc:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(f"user namespaces are required in CI: {exc}")
        pytest.skip(str(exc))
    finally:
        runner.close()


@pytest.fixture
def make_runner() -> Iterator[Callable[..., LocalRunner]]:
    """LocalRunners that are closed (launcher copy removed) after the test."""
    made: list[LocalRunner] = []

    def make(**kwargs: Any) -> LocalRunner:
        made.append(LocalRunner(logging.getLogger("lantern.test.egress"), **kwargs))
        return made[-1]

    yield make
    for runner in made:
        runner.close()


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = create_store_engine(f"sqlite:///{tmp_path / 'runs.db'}")
    create_tables(engine)
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sa.Engine]:
    if request.param == "sqlite":
        built = create_store_engine(f"sqlite:///{tmp_path / 'runs.db'}")
    else:
        built = create_store_engine(request.getfixturevalue("postgres_url"))
    create_tables(built)
    yield built
    built.dispose()


@pytest.fixture(scope="session")
def cgroup_tree() -> CgroupTree:
    """The writable cgroup tree runs' cgroups are made in. As root with CI=true it must be
    there; elsewhere (an unprivileged user without a delegated tree) its absence skips: the
    runner then falls back to per-process rlimits, tested on their own."""
    tree = CgroupTree.detect("auto")
    if tree is None:
        if os.geteuid() == 0 and os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("no writable cgroup tree (v2 with memory+pids, or v1 memory and pids)")
        pytest.skip("no writable cgroup tree here: per-run limits fall back to rlimits")
    return tree
