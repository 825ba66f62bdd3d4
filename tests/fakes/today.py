"""Replies shaped as the providers send them today, field for field, for the fake upstream's
opt-in `today` mode (`FakeUpstreamApp.today = True`): what Lantern's canonical types do not
model is here on purpose, so a test can ask whether the client got it all.

OpenAI: `refusal: null`, a url-citation annotation, logprobs, `completion_tokens_details` (27
reasoning tokens), `prompt_tokens_details.audio_tokens`, `service_tier`, `system_fingerprint`,
the stream's `obfuscation`. Anthropic: a web search (`server_tool_use`, `web_search_tool_result`),
a text block with citations (`citations_delta` when streamed), usage with the 5 min / 1 h
cache-write split, `server_tool_use` and `service_tier`.
"""

from __future__ import annotations

from typing import Any

import orjson

UPSTREAM_MODEL = {"openai": "gpt-4o-mini-2024-07-18", "anthropic": "claude-sonnet-4-5-20250929"}
TEXT = "Lantern ships today."
URL, TITLE = "https://example.com/news", "Lantern news"
CREATED = 1717171717
OPENAI_USAGE = {
    "prompt_tokens": 19,
    "completion_tokens": 33,
    "total_tokens": 52,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {
        "reasoning_tokens": 27,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    },
}
ANTHROPIC_USAGE = {
    "input_tokens": 12,
    "cache_creation_input_tokens": 310,
    "cache_read_input_tokens": 5120,
    "cache_creation": {"ephemeral_5m_input_tokens": 110, "ephemeral_1h_input_tokens": 200},
    "output_tokens": 41,
    "server_tool_use": {"web_search_requests": 1},
    "service_tier": "standard",
}
CITATION = {
    "type": "web_search_result_location",
    "url": URL,
    "title": TITLE,
    "encrypted_index": "Eo8BCioIAhgBIiQ",
    "cited_text": TEXT,
}
LOGPROB = {"token": "Lantern", "logprob": -0.01, "bytes": list(b"Lantern"), "top_logprobs": []}


def openai_reply() -> dict[str, Any]:
    annotation = {
        "type": "url_citation",
        "url_citation": {"start_index": 0, "end_index": len(TEXT), "url": URL, "title": TITLE},
    }
    message = {"role": "assistant", "content": TEXT, "refusal": None, "annotations": [annotation]}
    choice = {
        "index": 0,
        "message": message,
        "logprobs": {"content": [LOGPROB], "refusal": None},
        "finish_reason": "stop",
    }
    return {
        "id": "chatcmpl-today0001",
        "object": "chat.completion",
        "created": CREATED,
        "model": UPSTREAM_MODEL["openai"],
        "choices": [choice],
        "usage": OPENAI_USAGE,
        "service_tier": "default",
        "system_fingerprint": "fp_today01",
    }


def openai_chunks(include_usage: bool) -> list[dict[str, Any]]:
    head = {"id": "chatcmpl-today0001", "object": "chat.completion.chunk", "created": CREATED}
    head |= {"model": UPSTREAM_MODEL["openai"], "service_tier": "default"}
    head |= {"system_fingerprint": "fp_today01"}
    lp = {"content": [LOGPROB], "refusal": None}
    deltas = [
        ({"role": "assistant", "content": "", "refusal": None}, None, None),
        ({"content": "Lantern"}, lp, None),
        ({"content": TEXT.removeprefix("Lantern")}, lp, None),
        ({}, None, "stop"),
    ]
    chunks = [
        {**head, "choices": [{"index": 0, "delta": d, "logprobs": p, "finish_reason": f}]}
        | {"obfuscation": "xY" * (i + 1)}
        for i, (d, p, f) in enumerate(deltas)
    ]
    if include_usage:
        chunks.append({**head, "choices": [], "usage": OPENAI_USAGE, "obfuscation": "Qz"})
    return chunks


def anthropic_message() -> dict[str, Any]:
    search = {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search"}
    result = {
        "type": "web_search_result",
        "url": URL,
        "title": TITLE,
        "encrypted_content": "EqgfCioIARgBIiQ",
        "page_age": "April 30, 2025",
    }
    return {
        "id": "msg_today0001",
        "type": "message",
        "role": "assistant",
        "model": UPSTREAM_MODEL["anthropic"],
        "content": [
            {**search, "input": {"query": "lantern news"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": [result]},
            {"type": "text", "text": TEXT, "citations": [CITATION]},
        ],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": ANTHROPIC_USAGE,
        "container": None,
    }


def anthropic_frames() -> list[bytes]:
    """The message's SSE events as the API splits them (a citations_delta before the text)."""
    msg = anthropic_message()
    search, result, text = msg["content"]
    start_usage = {**ANTHROPIC_USAGE, "output_tokens": 1}
    start = {**msg, "content": [], "stop_reason": None, "usage": start_usage}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    events += _block(0, {**search, "input": {}}, [_json_delta(search["input"])])
    events += _block(1, result, [])
    cite = {"type": "citations_delta", "citation": CITATION}
    events += _block(2, {"type": "text", "text": ""}, [cite, {"type": "text_delta", "text": TEXT}])
    final = {k: ANTHROPIC_USAGE[k] for k in ("output_tokens", "server_tool_use")}
    delta = {"stop_reason": "end_turn", "stop_sequence": None}
    events += [{"type": "message_delta", "delta": delta, "usage": final}]
    events.append({"type": "message_stop"})
    return [b"event: %s\ndata: %s\n\n" % (e["type"].encode(), orjson.dumps(e)) for e in events]


def _json_delta(value: Any) -> dict[str, Any]:
    return {"type": "input_json_delta", "partial_json": orjson.dumps(value).decode()}


def _block(i: int, opened: dict[str, Any], deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"type": "content_block_start", "index": i, "content_block": opened},
        *({"type": "content_block_delta", "index": i, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": i},
    ]


def reply_frames(wire: str, body: dict[str, Any]) -> list[bytes]:
    """What the fake sends for a streamed call in today mode."""
    if wire == "anthropic":
        return anthropic_frames()
    options = body.get("stream_options") or {}
    chunks = openai_chunks(bool(options.get("include_usage")))
    return [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]


def reply_body(wire: str) -> dict[str, Any]:
    return anthropic_message() if wire == "anthropic" else openai_reply()


# Errors as the providers send them: OpenAI's `code` and `param`, Anthropic's `request_id`, the
# request id header each names, and the account's rate-limit headers
REQUEST_ID = {"openai": "req_7f3a9c1e2b4d", "anthropic": "req_011CVgHu1a7c"}
OPENAI_ERRORS = {
    400: {
        "message": "This model's maximum context length is 128000 tokens.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    },
    401: {
        "message": "Incorrect API key provided.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    },
    429: {
        "message": "Rate limit reached for requests.",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    },
}
ANTHROPIC_ERRORS = {
    400: {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens"},
    401: {"type": "authentication_error", "message": "invalid x-api-key"},
    413: {"type": "request_too_large", "message": "Request exceeds the maximum allowed size."},
    529: {"type": "overloaded_error", "message": "Overloaded"},
}
ACCOUNT_HEADERS = {
    "openai": {"x-ratelimit-remaining-requests": "4", "x-ratelimit-limit-requests": "500"},
    "anthropic": {"anthropic-ratelimit-requests-remaining": "4"},
}


def error_reply(wire: str, status: int) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The body and headers of an error `status` (one of the tables' statuses for `wire`)."""
    if wire == "anthropic":
        body: dict[str, Any] = {
            "type": "error",
            "error": ANTHROPIC_ERRORS[status],
            "request_id": REQUEST_ID[wire],
        }
    else:
        body = {"error": OPENAI_ERRORS[status]}
    id_header = "request-id" if wire == "anthropic" else "x-request-id"
    headers = {id_header: REQUEST_ID[wire], **ACCOUNT_HEADERS[wire]}
    return orjson.dumps(body), [(k.encode(), v.encode()) for k, v in headers.items()]


def broken_frames(wire: str) -> list[bytes]:
    """A stream the provider ends with an error once it has started: Anthropic's `error`
    event (overloaded), OpenAI's `data:` chunk holding an `error` object."""
    if wire == "anthropic":
        error = {"type": "error", "error": ANTHROPIC_ERRORS[529], "request_id": REQUEST_ID[wire]}
        return [*anthropic_frames()[:2], b"event: error\ndata: %s\n\n" % orjson.dumps(error)]
    error = {
        "message": "The server had an error while processing your request.",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    first = b"data: " + orjson.dumps(openai_chunks(False)[0]) + b"\n\n"
    return [first, b"data: " + orjson.dumps({"error": error}) + b"\n\n"]


def malformed_reply(wire: str) -> dict[str, Any]:
    """A 200 reply that breaks its wire's shape: OpenAI without a choice, Anthropic content
    that is no list of blocks."""
    if wire == "anthropic":
        return {**anthropic_message(), "content": "Lantern ships today."}
    return {**openai_reply(), "choices": []}


def malformed_frames(wire: str) -> list[bytes]:
    """A stream whose second event is no JSON object (the first is today's own)."""
    first = reply_frames(wire, {"stream": True})[0]
    if wire == "anthropic":
        return [first, b"event: content_block_start\ndata: [1, 2]\n\n"]
    return [first, b"data: [1, 2]\n\n"]
