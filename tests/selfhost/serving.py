"""The engine's OpenAI-compatible server in this process, on a random port, for tests that call
it over HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from bench._procs import free_port
from selfhost.engine.async_engine import AsyncEngine
from selfhost.engine.llm_engine import LLMEngine
from selfhost.serve.server import KEEP_ALIVE_S, create_app


@contextmanager
def serving(engine: LLMEngine, model: str) -> Iterator[str]:
    """The server's base URL while the block runs; stopped afterwards."""
    port = free_port()
    app = create_app(AsyncEngine(engine), model)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=KEEP_ALIVE_S
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
