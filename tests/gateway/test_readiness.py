"""Readiness is not liveness: /ready is 503 `starting` until the lifespan's start-up is done,
200 while serving and 503 `draining` from the first exit signal on (the server keeps serving
through `drain_grace_s`), while /health answers 200 throughout."""

from __future__ import annotations

import signal
from pathlib import Path

import uvicorn
import yaml
from fastapi.testclient import TestClient

from gateway.app import create_app
from gateway.http.readiness import Readiness
from gateway.http.server import TickServer
from gateway.settings import load_settings


def app_for(tmp_path: Path):  # type: ignore[no-untyped-def]
    (tmp_path / "p").mkdir()
    doc = {
        "database_url": f"sqlite:///{tmp_path}/l.db",
        "policy_dir": str(tmp_path / "p"),
        "var_dir": str(tmp_path),
        "server_secret": "x",
        "models": [],
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    return create_app(load_settings(tmp_path / "c.yaml"))


def test_ready_follows_start_up_and_drain_while_health_stays_up(tmp_path: Path) -> None:
    app = app_for(tmp_path)
    client = TestClient(app)
    before = client.get("/ready")  # no lifespan yet: start-up not done
    with client:
        during = client.get("/ready")
        app.state.readiness.drain()
        draining, health = client.get("/ready"), client.get("/health")
    assert (before.status_code, before.json()) == (503, {"status": "starting"})
    assert (during.status_code, during.json()) == (200, {"status": "ready"})
    assert (draining.status_code, draining.json()) == (503, {"status": "draining"})
    assert (health.status_code, health.json()) == (200, {"status": "ok"})


def test_an_exit_signal_marks_the_process_draining() -> None:
    """Outside a running loop there is no grace to wait through: the exit is asked at once (the
    grace itself, with a live listener, is in tests/e2e/test_scaleout_workers.py)."""
    readiness = Readiness()
    readiness.started()
    server = TickServer(uvicorn.Config(app=None), readiness=readiness, drain_grace_s=5.0)
    server.handle_exit(signal.SIGTERM, None)
    assert (readiness.state, server.should_exit) == ("draining", True)
