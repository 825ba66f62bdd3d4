"""The serving loop gets the GIL back from a busy worker thread (the ledger's writer) within
half a millisecond, not CPython's default 5 ms: a gateway's start-up lowers the process's
switch interval, and never raises one the operator set lower."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gateway.wiring.process import GIL_SWITCH_INTERVAL_S, share_the_gil
from tests.gateway.test_readiness import app_for


@pytest.fixture
def interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("interval")
def test_start_up_lowers_the_switch_interval(tmp_path: Path) -> None:
    sys.setswitchinterval(0.005)  # CPython's default
    app = app_for(tmp_path)
    before = sys.getswitchinterval()
    with TestClient(app):
        serving = sys.getswitchinterval()
    assert before == pytest.approx(0.005)
    assert serving == pytest.approx(GIL_SWITCH_INTERVAL_S, abs=1e-6)


@pytest.mark.usefixtures("interval")
def test_a_lower_interval_is_kept() -> None:
    sys.setswitchinterval(0.0001)
    set_by_operator = sys.getswitchinterval()  # CPython keeps whole microseconds
    share_the_gil()
    assert sys.getswitchinterval() == set_by_operator
