"""A wire-level fake of Anthropic's Messages API as Claude Code meets it: extended thinking
with signed blocks, tool use, prompt-cache usage, betas and `count_tokens`.

It checks what the real API checks on the next turn: with thinking on, an assistant turn that
used a tool must start with the thinking block the API signed, byte for byte, else the 400
the real API answers (`Expected 'thinking' or 'redacted_thinking'...`). Every request is
recorded (path, headers, raw body) so tests can compare what reached it with what the client
sent.
"""

from __future__ import annotations

import hashlib
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvicorn
from starlette.types import Receive, Scope, Send

from tests.fakes.asgi_replies import read_body as _read_body
from tests.fakes.asgi_replies import respond as _respond
from tests.fakes.upstream import RecordedRequest

SECRET = b"fake-claude-signing-key"
COUNT_TOKENS = 4321  # what count_tokens answers for any prompt
# the usage every reply reports: a long cached prefix, as a Claude Code session has
USAGE = {
    "input_tokens": 12,
    "cache_creation_input_tokens": 310,
    "cache_read_input_tokens": 5120,
    "output_tokens": 41,
}
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"


def sign(thinking: str) -> str:
    return hashlib.sha256(SECRET + thinking.encode()).hexdigest()


def _error(message: str) -> bytes:
    return orjson.dumps(
        {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    )


def thinking_error(messages: list[dict[str, Any]]) -> str | None:
    """The real API's refusal of a tool-using assistant turn without its signed thinking."""
    for i, msg in enumerate(messages):
        content = msg.get("content")
        if msg.get("role") != "assistant" or not isinstance(content, list):
            continue
        if not any(b.get("type") == "tool_use" for b in content):
            continue
        first = content[0]
        if first.get("type") == "redacted_thinking":
            continue
        if first.get("type") != "thinking":
            return (
                f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, "
                f"but found `{first.get('type')}`. When `thinking` is enabled, a final "
                "`assistant` message must start with a thinking block"
            )
        if first.get("signature") != sign(first.get("thinking", "")):
            return f"messages.{i}.content.0: Invalid `signature` in `thinking` block"
    return None


def budget_error(body: dict[str, Any]) -> str | None:
    """The real API's refusal of a thinking budget that does not fit."""
    thinking = body.get("thinking") or {}
    if thinking.get("type") != "enabled":
        return None
    budget = thinking.get("budget_tokens", 0)
    if budget < 1024:
        return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
    if body["max_tokens"] <= budget:
        return "`max_tokens` must be greater than `thinking.budget_tokens`"
    return None


def reply_blocks(turn: int, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Thinking (signed), then a tool call while the last user turn is not a tool result,
    else the answer."""
    text = f"Turn {turn}: the user wants the weather; I should look it up."
    blocks: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": text, "signature": sign(text)},
        {"type": "redacted_thinking", "data": REDACTED},
    ]
    last = body["messages"][-1]["content"]
    answered = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
    if answered:
        blocks.append({"type": "text", "text": "It is sunny in Paris."})
    else:
        tool = {"type": "tool_use", "id": f"toolu_{turn:04d}", "name": "get_weather"}
        blocks.append({**tool, "input": {"city": "Paris"}})
    return blocks


def _frame(event: dict[str, Any]) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def stream_frames(msg: dict[str, Any]) -> list[bytes]:
    """The SSE events of `msg`, as the real API splits them (thinking and signature deltas)."""
    start = {**msg, "content": [], "stop_reason": None, "usage": {**USAGE, "output_tokens": 1}}
    out = [_frame({"type": "message_start", "message": start}), _frame({"type": "ping"})]
    for i, block in enumerate(msg["content"]):
        out += [_frame(e) for e in _block_events(i, block)]
    delta = {"stop_reason": msg["stop_reason"], "stop_sequence": None}
    usage = {"output_tokens": USAGE["output_tokens"]}
    out.append(_frame({"type": "message_delta", "delta": delta, "usage": usage}))
    out.append(_frame({"type": "message_stop"}))
    return out


def _block_events(i: int, block: dict[str, Any]) -> list[dict[str, Any]]:
    kind = block["type"]
    deltas: list[dict[str, Any]] = []
    if kind == "thinking":
        opened = {"type": "thinking", "thinking": "", "signature": ""}
        half = len(block["thinking"]) // 2
        deltas = [
            {"type": "thinking_delta", "thinking": block["thinking"][:half]},
            {"type": "thinking_delta", "thinking": block["thinking"][half:]},
            {"type": "signature_delta", "signature": block["signature"]},
        ]
    elif kind == "redacted_thinking":
        opened = block
    elif kind == "text":
        opened = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": block["text"]}]
    else:
        opened = {**block, "input": {}}
        deltas = [
            {"type": "input_json_delta", "partial_json": orjson.dumps(block["input"]).decode()}
        ]
    return [
        {"type": "content_block_start", "index": i, "content_block": opened},
        *({"type": "content_block_delta", "index": i, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": i},
    ]


@dataclass
class ClaudeApp:
    requests: list[RecordedRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def messages_bodies(self) -> list[dict[str, Any]]:
        return [r.json() for r in self.requests if r.path == "/v1/messages"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        raw = await _read_body(receive)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        with self._lock:
            self.requests.append(RecordedRequest(scope["path"], headers, raw))
            turn = len(self.requests)
        body = orjson.loads(raw)
        if scope["path"] == "/v1/messages/count_tokens":
            unknown = set(body) - {
                "model",
                "messages",
                "system",
                "tools",
                "tool_choice",
                "thinking",
            }
            if unknown:
                await _respond(
                    send, 400, _error(f"{sorted(unknown)}: Extra inputs are not permitted")
                )
                return
            await _respond(send, 200, orjson.dumps({"input_tokens": COUNT_TOKENS}))
            return
        if scope["path"] != "/v1/messages" or "max_tokens" not in body:
            await _respond(send, 400, _error("max_tokens: Field required"))
            return
        refusal = budget_error(body) or (
            thinking_error(body["messages"]) if body.get("thinking") else None
        )
        if refusal is not None:
            await _respond(send, 400, _error(refusal))
            return
        await self._reply(turn, body, send)

    async def _reply(self, turn: int, body: dict[str, Any], send: Send) -> None:
        content = reply_blocks(turn, body)
        msg = {
            "id": f"msg_fake{turn:04d}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": "tool_use" if content[-1]["type"] == "tool_use" else "end_turn",
            "stop_sequence": None,
            "usage": USAGE,
        }
        if not body.get("stream"):
            await _respond(send, 200, orjson.dumps(msg))
            return
        head = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        for frame in stream_frames(msg):
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class FakeClaude:
    """Runs a ClaudeApp on 127.0.0.1 (a random port) in a background thread."""

    def __init__(self) -> None:
        self.app = ClaudeApp()
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
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeClaude:
        self._thread.start()
        for _ in range(500):
            if self._server.started:
                return self
            threading.Event().wait(0.01)
        raise RuntimeError("fake Claude did not start")

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)
        self._socket.close()
