"""Builds OpenAI response bodies and SSE event streams from engine outputs (chat and completions)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from selfhost.engine import RequestOutput
from selfhost.protocol import usage
from selfhost.sampler import TokenLogprobs

LogprobsBuilder = Callable[[list[TokenLogprobs]], dict[str, Any]]


@dataclass(frozen=True)
class ResponseShape:
    kind: str  # "chat" or "completion"
    model: str
    logprobs: LogprobsBuilder

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
        async for output in outputs:
            last = output
            if not output.new_text and not output.finished and not output.logprobs:
                continue
            chunk = self._envelope(request_id, chunk=True)
            chunk["choices"] = [
                self._choice(
                    output.new_text, list(output.logprobs), output.finish_reason, delta=True
                )
            ]
            yield _event(chunk)
        if include_usage and last is not None:
            tail = self._envelope(request_id, chunk=True)
            tail["choices"] = []
            tail["usage"] = usage(
                last.num_prompt_tokens, last.num_output_tokens, last.num_cached_tokens
            )
            yield _event(tail)
        yield "data: [DONE]\n\n"


def _event(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"


def chat_shape(model: str, logprobs: LogprobsBuilder) -> ResponseShape:
    return ResponseShape("chat", model, logprobs)


def completion_shape(model: str, logprobs: LogprobsBuilder) -> ResponseShape:
    return ResponseShape("completion", model, logprobs)
