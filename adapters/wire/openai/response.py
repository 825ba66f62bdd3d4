"""OpenAI chat-completion responses, usage and error bodies <-> canonical types.

Pure functions at the JSON edge; requests live in `request.py`, streams in
`stream.py`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import orjson

from adapters.errors import WireFormatError
from adapters.types import (
    ChatResponse,
    Choice,
    Citation,
    ReplyPart,
    StopReason,
    TextPart,
    ToolUsePart,
    Usage,
    WireReply,
)
from adapters.wire.citations import spans
from adapters.wire.json_fields import expect

FINISH_TO_STOP: dict[str, StopReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "error",
}


STOP_TO_FINISH: dict[StopReason, str] = {
    "stop": "stop",
    "length": "length",
    "tool_use": "tool_calls",
    "stop_sequence": "stop",
    "error": "content_filter",
}


def decode_tool_calls(value: Any, path: str) -> list[ToolUsePart]:
    calls = []
    for i, call in enumerate(expect(value, list, path)):
        p = f"{path}[{i}]"
        fn = expect(expect(call, dict, p).get("function"), dict, f"{p}.function")
        calls.append(
            ToolUsePart(
                id=expect(call.get("id"), str, f"{p}.id"),
                name=expect(fn.get("name"), str, f"{p}.function.name"),
                arguments_json=expect(fn.get("arguments", ""), str, f"{p}.function.arguments"),
            )
        )
    return calls


def encode_tool_calls(calls: list[ToolUsePart]) -> list[dict[str, Any]]:
    return [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": c.arguments_json},
        }
        for c in calls
    ]


def decode_usage(usage: Mapping[str, Any] | None) -> Usage:
    """OpenAI usage -> canonical. Cache writes come from `prompt_tokens_details.
    cache_write_tokens` or LiteLLM's `cache_creation_input_tokens`; both are inside
    `prompt_tokens`, like `cached_tokens`. Reasoning and audio counts come from the details."""
    if not usage:
        return Usage()
    details = usage.get("prompt_tokens_details")
    if details:
        read = details.get("cached_tokens") or usage.get("cache_read_input_tokens") or 0
        write = details.get("cache_write_tokens") or usage.get("cache_creation_input_tokens") or 0
        audio_in = details.get("audio_tokens") or 0
    else:
        read = usage.get("cache_read_input_tokens") or 0
        write = usage.get("cache_creation_input_tokens") or 0
        audio_in = 0
    reasoning = audio_out = 0
    if "completion_tokens_details" in usage and isinstance(
        usage["completion_tokens_details"], dict
    ):
        out = usage["completion_tokens_details"]
        reasoning, audio_out = out.get("reasoning_tokens") or 0, out.get("audio_tokens") or 0
    prompt = usage.get("prompt_tokens") or 0
    return Usage(
        input_tokens=max(prompt - read - write, 0),
        output_tokens=usage.get("completion_tokens") or 0,
        cache_read_tokens=read,
        cache_write_tokens=write,
        reasoning_tokens=reasoning,
        audio_input_tokens=audio_in,
        audio_output_tokens=audio_out,
    )


def encode_usage(usage: Usage) -> dict[str, Any]:
    details = {"cached_tokens": usage.cache_read_tokens}
    if usage.cache_write_tokens:
        details["cache_write_tokens"] = usage.cache_write_tokens
    if usage.audio_input_tokens:
        details["audio_tokens"] = usage.audio_input_tokens
    out: dict[str, Any] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": details,
    }
    if usage.reasoning_tokens or usage.audio_output_tokens:  # told by the provider
        out["completion_tokens_details"] = {
            "reasoning_tokens": usage.reasoning_tokens,
            "audio_tokens": usage.audio_output_tokens,
        }
    return out


def decode_annotations(value: Any) -> tuple[Citation, ...]:
    """`url_citation` annotations -> canonical citations (indices into the message content).
    Other kinds, and any without a URL and both indices, carry nothing the canonical model
    holds: skipped, never an error (the client of this wire gets them as sent)."""
    out = []
    for note in value if isinstance(value, list) else ():
        cite = note.get("url_citation") if isinstance(note, dict) else None
        if not isinstance(cite, dict) or note.get("type") != "url_citation":
            continue
        url, title = cite.get("url"), cite.get("title") or ""
        start, end = cite.get("start_index"), cite.get("end_index")
        if isinstance(url, str) and isinstance(title, str) and _is_index(start, end):
            out.append(Citation(url, title, start, end))
    return tuple(out)


def _is_index(*values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)


def encode_annotations(parts: list[TextPart]) -> list[dict[str, Any]]:
    """Citations as `url_citation` annotations over the parts' texts joined."""
    return [
        {
            "type": "url_citation",
            "url_citation": {
                "url": s.citation.url,
                "title": s.citation.title,
                "start_index": s.start_index,
                "end_index": s.end_index,
            },
        }
        for s in spans(parts)
    ]


def _decode_choice(choice: Any, path: str) -> Choice:
    msg = expect(expect(choice, dict, path).get("message"), dict, f"{path}.message")
    content: list[ReplyPart] = []
    if msg.get("content"):
        text = expect(msg["content"], str, f"{path}.message.content")
        if "annotations" in msg and msg["annotations"]:
            content.append(TextPart(text, citations=decode_annotations(msg["annotations"])))
        else:
            content.append(TextPart(text))
    if msg.get("tool_calls"):
        content.extend(decode_tool_calls(msg["tool_calls"], f"{path}.message.tool_calls"))
    stop = FINISH_TO_STOP.get(choice.get("finish_reason") or "stop", "stop")
    return Choice(tuple(content), stop)


def decode_response(body: Mapping[str, Any], upstream: WireReply | None = None) -> ChatResponse:
    """Canonical form of an OpenAI reply; `upstream`: the backend's own reply, kept on it."""
    raw = expect(body.get("choices"), list, "choices")
    if not raw:
        raise WireFormatError("choices", "expected at least one choice")
    choices = [_decode_choice(c, f"choices[{i}]") for i, c in enumerate(raw)]
    extra: dict[str, Any] = {k: body[k] for k in _REPLY_EXTRA if body.get(k) is not None}
    logprobs = [c.get("logprobs") for c in raw]
    if any(lp is not None for lp in logprobs):
        extra["logprobs"] = logprobs
    return ChatResponse(
        id=str(body.get("id", "")),
        model=str(body.get("model", "")),
        content=choices[0].content,
        stop_reason=choices[0].stop_reason,
        usage=decode_usage(body.get("usage")),
        more_choices=tuple(choices[1:]),
        wire_extra=extra,
        upstream=upstream,
    )


_REPLY_EXTRA = ("system_fingerprint", "service_tier")


def _encode_choice(index: int, choice: Choice, logprobs: Any) -> dict[str, Any]:
    texts = [p for p in choice.content if isinstance(p, TextPart)]
    text = "".join(p.text for p in texts)
    calls = [p for p in choice.content if isinstance(p, ToolUsePart)]
    # `refusal` is required by OpenAI's document (the API sends null when the model answered)
    content = text if text or not calls else None
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if any(p.citations for p in texts):
        message["annotations"] = encode_annotations(texts)
    if calls:
        message["tool_calls"] = encode_tool_calls(calls)
    return {
        "index": index,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": STOP_TO_FINISH[choice.stop_reason],
    }


def encode_response(resp: ChatResponse, *, created: int | None = None) -> dict[str, Any]:
    choices = (Choice(resp.content, resp.stop_reason), *resp.more_choices)
    logprobs = resp.wire_extra.get("logprobs")
    logprobs = logprobs if isinstance(logprobs, list) else []
    out: dict[str, Any] = {
        "id": resp.id,
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": resp.model,
        "choices": [
            _encode_choice(i, c, logprobs[i] if i < len(logprobs) else None)
            for i, c in enumerate(choices)
        ],
        "usage": encode_usage(resp.usage),
    }
    out.update((k, resp.wire_extra[k]) for k in _REPLY_EXTRA if k in resp.wire_extra)
    return out


def encode_error(
    message: str, type_: str, *, param: str | None = None, code: str | None = None
) -> bytes:
    """The error body OpenAI clients parse: {"error": {"message","type","param","code"}}."""
    return orjson.dumps(
        {"error": {"message": message, "type": type_, "param": param, "code": code}}
    )
