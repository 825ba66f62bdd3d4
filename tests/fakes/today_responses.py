"""A Responses API reply shaped as OpenAI sends one today, field for field, for the fake
upstream's `today` mode on `POST /v1/responses` (tests/fakes/responses_api.py): a reasoning
model that searched the web. What Lantern does not model is here on purpose, so a test can ask
whether the client got it all.

The reply: a reasoning item (`encrypted_content`, a summary), a `web_search_call` item (its
action and sources), a message whose `output_text` carries a `url_citation` annotation and
logprobs, usage with `cached_tokens` and `reasoning_tokens`, `service_tier`, `billing`,
`text.verbosity`, the web search tool as echoed. Streamed: every event OpenAI sends for it
(reasoning summary parts, web search progress, text deltas with `obfuscation`, the annotation),
numbered by `sequence_number`.
"""

from __future__ import annotations

from typing import Any

import orjson

from tests.fakes.today import TEXT, TITLE, URL

MODEL = "gpt-5-2025-08-07"
RESPONSE_ID = "resp_68c1today0001"
CREATED = 1757500000
SUMMARY = "**Searching for Lantern news** I looked up the latest release."
USAGE = {
    "input_tokens": 9012,
    "input_tokens_details": {"cached_tokens": 8960},
    "output_tokens": 412,
    "output_tokens_details": {"reasoning_tokens": 320},
    "total_tokens": 9424,
}
ANNOTATION = {
    "type": "url_citation",
    "start_index": 0,
    "end_index": len(TEXT),
    "title": TITLE,
    "url": URL,
}
REASONING = {
    "id": "rs_68c1today0001",
    "type": "reasoning",
    "encrypted_content": "gAAAAABoweb-opaque-reasoning==",
    "summary": [{"type": "summary_text", "text": SUMMARY}],
}
SEARCH = {
    "id": "ws_68c1today0001",
    "type": "web_search_call",
    "status": "completed",
    "action": {
        "type": "search",
        "query": "lantern news",
        "sources": [{"type": "url", "url": URL}],
    },
}
MESSAGE = {
    "id": "msg_68c1today0001",
    "type": "message",
    "status": "completed",
    "content": [{"type": "output_text", "annotations": [ANNOTATION], "logprobs": [], "text": TEXT}],
    "role": "assistant",
}
WEB_SEARCH_TOOL = {
    "type": "web_search",
    "filters": None,
    "search_context_size": "medium",
    "user_location": {"type": "approximate", "city": None, "country": "US", "region": None},
}


def response(status: str = "completed") -> dict[str, Any]:
    """The response object: done, or as `response.created` carries it (no output, no usage)."""
    done = status == "completed"
    return {
        "id": RESPONSE_ID,
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "background": False,
        "billing": {"payer": "developer"},
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": 100,
        "max_tool_calls": None,
        "model": MODEL,
        "output": [REASONING, SEARCH, MESSAGE] if done else [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "prompt_cache_key": None,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "safety_identifier": None,
        "service_tier": "default",
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [WEB_SEARCH_TOOL],
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": USAGE if done else None,
        "user": None,
        "metadata": {},
    }


def events() -> list[dict[str, Any]]:
    """The stream's events in order, each with its `sequence_number`."""
    opened = {**REASONING, "summary": []}
    summary_part = {"type": "summary_text", "text": ""}
    text_part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
    rs = {"item_id": REASONING["id"], "output_index": 0, "summary_index": 0}
    ws = {"item_id": SEARCH["id"], "output_index": 1}
    msg = {"item_id": MESSAGE["id"], "output_index": 2, "content_index": 0}
    head, tail = TEXT[:7], TEXT[7:]
    found: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": response("in_progress")}),
        ("response.in_progress", {"response": response("in_progress")}),
        ("response.output_item.added", {"output_index": 0, "item": opened}),
        ("response.reasoning_summary_part.added", {**rs, "part": summary_part}),
        ("response.reasoning_summary_text.delta", {**rs, "delta": SUMMARY, "obfuscation": "q"}),
        ("response.reasoning_summary_text.done", {**rs, "text": SUMMARY}),
        ("response.reasoning_summary_part.done", {**rs, "part": REASONING["summary"][0]}),
        ("response.output_item.done", {"output_index": 0, "item": REASONING}),
        ("response.output_item.added", {"output_index": 1, "item": _searching()}),
        ("response.web_search_call.in_progress", ws),
        ("response.web_search_call.searching", ws),
        ("response.web_search_call.completed", ws),
        ("response.output_item.done", {"output_index": 1, "item": SEARCH}),
        ("response.output_item.added", {"output_index": 2, "item": _writing()}),
        ("response.content_part.added", {**msg, "part": text_part}),
        ("response.output_text.delta", {**msg, "delta": head, "logprobs": [], "obfuscation": "Ab"}),
        ("response.output_text.delta", {**msg, "delta": tail, "logprobs": [], "obfuscation": "c"}),
        (
            "response.output_text.annotation.added",
            {**msg, "annotation_index": 0, "annotation": ANNOTATION},
        ),
        ("response.output_text.done", {**msg, "text": TEXT, "logprobs": []}),
        ("response.content_part.done", {**msg, "part": MESSAGE["content"][0]}),
        ("response.output_item.done", {"output_index": 2, "item": MESSAGE}),
        ("response.completed", {"response": response()}),
    ]
    return [
        {"type": kind, **fields, "sequence_number": i} for i, (kind, fields) in enumerate(found)
    ]


def _searching() -> dict[str, Any]:
    return {"id": SEARCH["id"], "type": "web_search_call", "status": "in_progress"}


def _writing() -> dict[str, Any]:
    return {**MESSAGE, "status": "in_progress", "content": []}


def frames() -> list[bytes]:
    """The events as OpenAI frames them: `event:` then `data:`."""
    return [b"event: %s\ndata: %s\n\n" % (e["type"].encode(), orjson.dumps(e)) for e in events()]
