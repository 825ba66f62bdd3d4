"""A wire-level fake of engines' `/metrics`: a real local HTTP server answering
GET /<name>/metrics with Prometheus text, an HTTP status, or a stall; and the bundled
engine's own exposition for given load figures."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from selfhost.engine.llm_engine import EngineStats
from selfhost.serve.metrics import render_metrics


def bundled(waiting: int, running: int, kv_usage: float, kv_blocks: int = 0) -> str:
    """What the bundled engine's /metrics says for these figures (its real renderer)."""
    stats = EngineStats(running, waiting, kv_usage, 100, 40, 0, 1000, 200, 12.5, kv_blocks)
    return render_metrics(stats, "smollm2")


class Engines:
    """Answers GET /<name>/metrics with what `bodies[name]` says: text, a status, or a stall."""

    def __init__(self) -> None:
        self.bodies: dict[str, str | int] = {}
        self.hits: dict[str, int] = {}
        self.release = threading.Event()
        engines = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                name = self.path.strip("/").split("/")[0]
                engines.hits[name] = engines.hits.get(name, 0) + 1
                body = engines.bodies.get(name, 404)
                if body == "stall":
                    engines.release.wait(10)
                    body = bundled(0, 0, 0.0)
                if isinstance(body, int):
                    self.send_response(body)
                    self.end_headers()
                    return
                data = body.encode()
                self.send_response(200)
                self.send_header("content-type", "text/plain; version=0.0.4")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()  # `close` waits for the next poll (the default is 0.5 s)

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
