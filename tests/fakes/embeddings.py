"""A wire-level fake of OpenAI's `/v1/embeddings`: deterministic vectors, usage that counts one
token per word (so tests can assert exact counts and costs), every request recorded."""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass, field

import orjson
import uvicorn
from starlette.types import Receive, Scope, Send

from tests.fakes.asgi_replies import read_body as _read_body
from tests.fakes.asgi_replies import respond as _respond
from tests.fakes.upstream import RecordedRequest


def vector(text: str) -> list[float]:
    return [float(len(text)), float(len(text.split())), 0.5]


@dataclass
class EmbeddingsApp:
    requests: list[RecordedRequest] = field(default_factory=list)
    delay_s: float = 0.0  # before an embeddings reply: a client may leave meanwhile

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        raw = await _read_body(receive)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.requests.append(RecordedRequest(scope["path"], headers, raw))
        if scope["path"] != "/v1/embeddings":
            await _respond(send, 404, b'{"error": {"message": "no such route"}}')
            return
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        body = orjson.loads(raw)
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        data = [
            {"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(texts)
        ]
        words = sum(len(t.split()) for t in texts)
        reply = {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": words, "total_tokens": words},
        }
        await _respond(send, 200, orjson.dumps(reply))


class FakeEmbeddings:
    def __init__(self) -> None:
        self.app = EmbeddingsApp()
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(self.app, lifespan="off", log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeEmbeddings:
        self._thread.start()
        for _ in range(500):
            if self._server.started:
                return self
            threading.Event().wait(0.01)
        raise RuntimeError("fake embeddings did not start")

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)
        self._socket.close()
