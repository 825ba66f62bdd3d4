"""A wire-level fake of Bedrock runtime's Converse, ConverseStream and (for the embedding
models) InvokeModel HTTP API.

A real local HTTP server that boto3 reaches through `endpoint_url`: it checks the SigV4
credential scope (region, service), keeps an exact-prefix prompt cache at `cachePoint` blocks
with a TTL, answers with usage incl. cache read/write tokens, streams AWS event-stream frames
(prelude and message CRC32s, typed headers) and fails on demand (HTTP errors or mid-stream).
Tokens are whitespace-separated words, so tests can assert exact counts.
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

LOOKBACK_BLOCKS = 20
POLL_S = 0.02  # how often the server loop looks for `stop`


def encode_event(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message: prelude (lengths + CRC), string headers, payload, CRC."""
    raw = b""
    for name, value in headers.items():
        n, v = name.encode(), value.encode()
        raw += struct.pack(">B", len(n)) + n + struct.pack(">BH", 7, len(v)) + v
    total = 12 + len(raw) + len(payload) + 4
    prelude = struct.pack(">II", total, len(raw))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + raw + payload
    return message + struct.pack(">I", zlib.crc32(message))


def _event(kind: str, body: dict[str, Any]) -> bytes:
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return encode_event(headers, json.dumps(body).encode())


def _exception(code: str, message: str) -> bytes:
    headers = {
        ":exception-type": code,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_event(headers, json.dumps({"message": message}).encode())


@dataclass
class Reply:
    text: str = "hello from the fake"
    tool_use: tuple[str, str, dict[str, Any]] | None = None  # (id, name, input)
    stop_reason: str = "end_turn"


@dataclass
class Failure:
    status: int  # HTTP status; with mid_stream, the stream fails after its first text delta
    code: str  # ThrottlingException, ServiceUnavailableException, ValidationException, ...
    mid_stream: bool = False


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    return len(json.dumps(value, sort_keys=True).split())


def _block_tokens(block: dict[str, Any]) -> int:
    if "text" in block:
        return _words(block["text"])
    if "toolSpec" in block:
        spec = block["toolSpec"]
        return (
            _words(spec["name"]) + _words(spec.get("description", "")) + _words(spec["inputSchema"])
        )
    if "toolUse" in block:
        return _words(block["toolUse"]["name"]) + _words(block["toolUse"]["input"])
    if "toolResult" in block:
        return sum(
            _block_tokens(c) if "json" not in c else _words(c["json"])
            for c in block["toolResult"]["content"]
        )
    if "image" in block:
        return 100
    return 0


def _blocks_in_order(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The cache's prefix order: tools, then system, then messages (role marks each turn)."""
    yield from body.get("toolConfig", {}).get("tools", [])
    yield from body.get("system", [])
    for message in body.get("messages", []):
        yield {"role": message["role"]}
        yield from message["content"]


def embedding(text: str, dimensions: int) -> list[float]:
    """A deterministic vector: the text's length and word count, then 0.5s."""
    return [float(len(text)), float(_words(text))] + [0.5] * (dimensions - 2)


COHERE_INPUT_TYPES = ("search_document", "search_query", "classification", "clustering")


def invoke_embedding(model_id: str, body: dict[str, Any]) -> tuple[dict[str, Any], int] | str:
    """An embedding model's InvokeModel reply and its input tokens, or a ValidationException's
    message. Titan v2 checks `dimensions` (256, 512, 1024; default 1024); Cohere v3 embeds up
    to 96 texts of one `input_type` into 1024 dimensions."""
    if "titan-embed-text" in model_id:
        text, dims = body.get("inputText"), body.get("dimensions", 1024)
        if not isinstance(text, str) or not text or set(body) - {"inputText", "dimensions"}:
            return "expected inputText (a non-empty string) and at most dimensions"
        if dims not in (256, 512, 1024):
            return "dimensions must be 256, 512 or 1024"
        vector = embedding(text, dims)
        tokens = _words(text)
        reply = {"embedding": vector, "embeddingsByType": {"float": vector}}
        return {**reply, "inputTextTokenCount": tokens}, tokens
    if "cohere.embed" in model_id:
        texts = body.get("texts")
        if not isinstance(texts, list) or not 0 < len(texts) <= 96:
            return "texts must hold 1 to 96 strings"
        if body.get("input_type") not in COHERE_INPUT_TYPES:
            return "input_type is required"
        vectors = [embedding(t, 1024) for t in texts]
        reply = {"id": "emb-1", "embeddings": vectors, "texts": texts}
        return {**reply, "response_type": "embeddings_floats"}, sum(_words(t) for t in texts)
    return f"{model_id} does not support InvokeModel embeddings here"


@dataclass
class FakeBedrock:
    region: str = "us-east-1"
    ttl_s: float = 300.0
    min_cache_tokens: int = 0
    clock: Callable[[], float] = time.monotonic
    replies: deque[Reply] = field(default_factory=deque)
    failures: deque[Failure] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)  # path, body, auth, traceparent
    cache: dict[str, float] = field(default_factory=dict)  # prefix key -> expiry
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeBedrock:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                fake.handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # `stop` waits for the loop's next poll (the default is 0.5 s, in every teardown)
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": POLL_S}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # --- the prompt cache -----------------------------------------------------------------

    def usage_for(self, body: dict[str, Any], account: str = "") -> dict[str, int]:
        """Exact-prefix cache: writes at cache points; a read finds the longest live prefix at a
        block boundary up to LOOKBACK_BLOCKS before a cache point (Anthropic-style look-back).
        Entries are per AWS access key (`account`): calls signed with one key share them."""
        now = self.clock()
        digest, tokens = hashlib.sha256(account.encode() + b"\0"), 0
        boundaries: list[tuple[str, int]] = []  # after each content block: (prefix key, tokens)
        points: list[int] = []  # indices into boundaries
        for block in _blocks_in_order(body):
            if "cachePoint" in block:
                if boundaries and tokens >= self.min_cache_tokens:
                    points.append(len(boundaries) - 1)
                continue
            digest.update(json.dumps(block, sort_keys=True).encode())
            if "role" in block:
                continue
            tokens += _block_tokens(block)
            boundaries.append((digest.copy().hexdigest(), tokens))
        read = 0
        for p in points:
            for key, at in boundaries[max(0, p - LOOKBACK_BLOCKS) : p + 1]:
                if self.cache.get(key, -1.0) > now:
                    read = max(read, at)
        write = max(boundaries[points[-1]][1] - read, 0) if points else 0
        for p in points:
            self.cache[boundaries[p][0]] = now + self.ttl_s  # written or refreshed
        return {
            "inputTokens": tokens - read - write,
            "cacheReadInputTokens": read,
            "cacheWriteInputTokens": write,
        }

    # --- HTTP -------------------------------------------------------------------------------

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("content-length", "0"))
        body = json.loads(h.rfile.read(length) or b"{}")
        auth = h.headers.get("authorization", "")
        traceparent = h.headers.get("traceparent")
        self.requests.append(
            {"path": h.path, "body": body, "auth": auth, "traceparent": traceparent}
        )
        scope = f"/{self.region}/bedrock/aws4_request"
        if not auth.startswith("AWS4-HMAC-SHA256 Credential=") or scope not in auth:
            self._error(h, 403, "UnrecognizedClientException", "missing or wrong SigV4 scope")
            return
        failure = self.failures.popleft() if self.failures else None
        if failure is not None and not failure.mid_stream:
            self._error(h, failure.status, failure.code, f"injected {failure.code}")
            return
        if h.path.endswith("/invoke"):
            self._invoke(h, unquote(h.path.split("/")[2]), body)
            return
        if not body.get("messages"):
            self._error(h, 400, "ValidationException", "messages must not be empty")
            return
        reply = self.replies.popleft() if self.replies else Reply()
        usage = self.usage_for(body, auth.split("Credential=", 1)[1].split("/", 1)[0])
        usage["outputTokens"] = _words(reply.text) + (
            _words(reply.tool_use[2]) if reply.tool_use else 0
        )
        usage["totalTokens"] = sum(usage.values())
        if h.path.endswith("/converse-stream"):
            self._stream(h, reply, usage, failure)
        else:
            self._converse(h, reply, usage)

    def _send(
        self, h: BaseHTTPRequestHandler, status: int, headers: dict[str, str], data: bytes
    ) -> None:
        h.send_response(status)
        for k, v in {
            **headers,
            "content-length": str(len(data)),
            "x-amzn-requestid": f"req-{len(self.requests)}",
        }.items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        headers = {"content-type": "application/json", "x-amzn-errortype": f"{code}:"}
        self._send(h, status, headers, json.dumps({"message": message}).encode())

    def _invoke(self, h: BaseHTTPRequestHandler, model_id: str, body: dict[str, Any]) -> None:
        """InvokeModel for the embedding models: Titan (one `inputText`) and Cohere (`texts`)."""
        answer = invoke_embedding(model_id, body)
        if isinstance(answer, str):
            self._error(h, 400, "ValidationException", answer)
            return
        reply, tokens = answer
        headers = {
            "content-type": "application/json",
            "x-amzn-bedrock-input-token-count": str(tokens),
            "x-amzn-bedrock-invocation-latency": "1",
        }
        self._send(h, 200, headers, json.dumps(reply).encode())

    def _converse(self, h: BaseHTTPRequestHandler, reply: Reply, usage: dict[str, int]) -> None:
        content: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
        if reply.tool_use:
            tid, name, args = reply.tool_use
            content.append({"toolUse": {"toolUseId": tid, "name": name, "input": args}})
        out = {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": reply.stop_reason,
            "usage": usage,
            "metrics": {"latencyMs": 1},
        }
        self._send(h, 200, {"content-type": "application/json"}, json.dumps(out).encode())

    def _stream(
        self,
        h: BaseHTTPRequestHandler,
        reply: Reply,
        usage: dict[str, int],
        failure: Failure | None,
    ) -> None:
        h.send_response(200)
        h.send_header("content-type", "application/vnd.amazon.eventstream")
        h.send_header("transfer-encoding", "chunked")
        h.send_header("x-amzn-requestid", f"req-{len(self.requests)}")
        h.end_headers()

        def chunk(data: bytes) -> None:
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            h.wfile.flush()

        chunk(_event("messageStart", {"role": "assistant"}))
        words = reply.text.split(" ") if reply.text else []
        for i, word in enumerate(words):
            chunk(
                _event(
                    "contentBlockDelta",
                    {"contentBlockIndex": 0, "delta": {"text": word if i == 0 else " " + word}},
                )
            )
            if failure is not None:
                code = failure.code[:1].lower() + failure.code[1:]
                chunk(_exception(code, f"injected {failure.code}"))
                h.wfile.write(b"0\r\n\r\n")
                return
        if words:
            chunk(_event("contentBlockStop", {"contentBlockIndex": 0}))
        if reply.tool_use:
            tid, name, args = reply.tool_use
            index = 1 if words else 0
            chunk(
                _event(
                    "contentBlockStart",
                    {
                        "contentBlockIndex": index,
                        "start": {"toolUse": {"toolUseId": tid, "name": name}},
                    },
                )
            )
            text = json.dumps(args)
            for part in (text[: len(text) // 2], text[len(text) // 2 :]):
                chunk(
                    _event(
                        "contentBlockDelta",
                        {"contentBlockIndex": index, "delta": {"toolUse": {"input": part}}},
                    )
                )
            chunk(_event("contentBlockStop", {"contentBlockIndex": index}))
        chunk(_event("messageStop", {"stopReason": reply.stop_reason}))
        chunk(_event("metadata", {"usage": usage, "metrics": {"latencyMs": 1}}))
        h.wfile.write(b"0\r\n\r\n")
