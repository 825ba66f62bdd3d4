"""Builds OpenAI response bodies and SSE event streams from engine outputs (chat and completions)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from selfhost.engine.llm_engine import RequestOutput
from selfhost.engine.sampler import TokenLogprobs
from selfhost.serve.protocol import usage
from selfhost.structured.tool_parser import CallDelta, ToolCall, ToolCallParser

LogprobsBuilder = Callable[[list[TokenLogprobs]], dict[str, Any]]


@dataclass(frozen=True)
class ResponseShape:
    kind: str  # "chat" or "completion"
    model: str
    logprobs: LogprobsBuilder
    parses_calls: bool = False  # chat with tools: <tool_call> text becomes `tool_calls`

    @property
    def id_prefix(self) -> str:
        return "chatcmpl" if self.kind == "chat" else "cmpl"

    def _envelope(self, request_id: str, chunk: bool) -> dict[str, Any]:
        obj = {"chat": "chat.completion", "completion": "text_completion"}[self.kind]
        return {
            "id": request_id,
            "object": obj + (".chunk" if chunk and self.kind == "chat" else ""),
            "created": int(time.time()),
            "model": self.model,
        }

    def _choice(
        self, text: str, items: list[TokenLogprobs], finish: str | None, delta: bool
    ) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
        choice["logprobs"] = self.logprobs(items) if items else None
        if self.kind == "completion":
            choice["text"] = text
        elif delta:
            choice["delta"] = {"content": text} if text or finish is None else {}
        else:
            choice["message"] = {"role": "assistant", "content": text}
        return choice

    def full(self, request_id: str, outputs: list[RequestOutput]) -> dict[str, Any]:
        last = outputs[-1]
        items = [lp for out in outputs for lp in out.logprobs]
        body = self._envelope(request_id, chunk=False)
        text = "".join(out.new_text for out in outputs)
        body["choices"] = [self._choice(text, items, last.finish_reason, delta=False)]
        if self.parses_calls and last.finish_reason == "stop":  # a cut reply claims no call
            parser = ToolCallParser()
            parser.feed(text)
            parser.finish()
            if parser.calls and _all_parse(parser.calls):
                body["choices"][0]["message"] = {
                    "role": "assistant",
                    "content": parser.content or None,
                    "tool_calls": [_call(c.call_id, c.name, c.arguments) for c in parser.calls],
                }
                body["choices"][0]["finish_reason"] = _calls_finish(last.finish_reason)
        body["usage"] = usage(
            last.num_prompt_tokens, last.num_output_tokens, last.num_cached_tokens
        )
        return body

    async def sse(
        self, request_id: str, outputs: AsyncIterator[RequestOutput], include_usage: bool
    ) -> AsyncIterator[str]:
        if self.kind == "chat":
            first = self._envelope(request_id, chunk=True)
            first["choices"] = [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ]
            yield _event(first)
        last: RequestOutput | None = None
        parser = ToolCallParser() if self.parses_calls else None
        async for output in outputs:
            last = output
            text, calls = output.new_text, list[CallDelta]()
            if parser is not None:
                text, calls = _parse_step(parser, output)
            if not text and not calls and not output.finished and not output.logprobs:
                continue
            finish = output.finish_reason
            if parser is not None and parser.calls and _all_parse(parser.calls):
                finish = _calls_finish(finish)
            chunk = self._envelope(request_id, chunk=True)
            chunk["choices"] = [self._choice(text, list(output.logprobs), finish, delta=True)]
            if calls:
                delta = chunk["choices"][0]["delta"]
                if not text:
                    delta.pop("content", None)
                delta["tool_calls"] = [_call_delta(d) for d in calls]
            yield _event(chunk)
        if include_usage and last is not None:
            tail = self._envelope(request_id, chunk=True)
            tail["choices"] = []
            tail["usage"] = usage(
                last.num_prompt_tokens, last.num_output_tokens, last.num_cached_tokens
            )
            yield _event(tail)
        yield "data: [DONE]\n\n"


def _parse_step(parser: ToolCallParser, output: RequestOutput) -> tuple[str, list[CallDelta]]:
    text, calls = parser.feed(output.new_text)
    if output.finished:
        rest, more = parser.finish()
        text, calls = text + rest, calls + more
    return text, calls


def _calls_finish(reason: str | None) -> str | None:
    """A reply that called tools ends with "tool_calls" unless it was cut short."""
    return "tool_calls" if reason == "stop" else reason


def _all_parse(calls: list[ToolCall]) -> bool:
    """Every call's arguments are a JSON object (what a client will `json.loads`)."""
    for call in calls:
        try:
            if not isinstance(json.loads(call.arguments), dict):
                return False
        except ValueError:
            return False
    return True


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _call_delta(delta: CallDelta) -> dict[str, Any]:
    if delta.name is None:
        return {"index": delta.index, "function": {"arguments": delta.arguments}}
    call = _call(delta.call_id or "", delta.name, delta.arguments)
    return {"index": delta.index, **call}


def _event(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"


def chat_shape(model: str, logprobs: LogprobsBuilder, parses_calls: bool = False) -> ResponseShape:
    return ResponseShape("chat", model, logprobs, parses_calls)


def completion_shape(model: str, logprobs: LogprobsBuilder) -> ResponseShape:
    return ResponseShape("completion", model, logprobs)
