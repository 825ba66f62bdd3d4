"""The Responses API reply object (`{"object": "response", ...}`) and its usage block.

Pure functions at the JSON edge: the envelope echoes the request's settings, as OpenAI's does;
the stream encoder (`stream.py`) builds its `response.*` events on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from adapters.types import JSON, ChatResponse, StopReason, Usage
from adapters.wire.responses.items import output_items
from adapters.wire.responses.request import ResponsesRequest


def encode_usage(usage: Usage) -> dict[str, Any]:
    """`input_tokens` counts every prompt token, cached or not (OpenAI's meaning)."""
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def _tool_choice(choice: JSON) -> JSON:
    if isinstance(choice, dict):
        return {"type": "function", "name": choice["name"]}
    return choice or "auto"


def _tools(req: ResponsesRequest) -> list[dict[str, JSON]]:
    return [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": dict(t.input_schema),
            "strict": None,
        }
        for t in req.tools
    ]


def envelope(
    response_id: str, req: ResponsesRequest, created_at: int, status: str = "in_progress"
) -> dict[str, Any]:
    """The response object before any output: what `response.created` carries (no `usage`
    until it is done: OpenAI's document has it as an object, never null)."""
    text: dict[str, JSON] = {"format": dict(req.text_format or {"type": "text"})}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "model": req.model,
        "output": [],
        "parallel_tool_calls": req.parallel_tool_calls,
        "previous_response_id": req.previous_response_id,
        "reasoning": {"effort": req.reasoning_effort, "summary": None},
        "store": req.store,
        "temperature": req.temperature,
        "text": text,
        "tool_choice": _tool_choice(req.tool_choice),
        "tools": _tools(req),
        "top_p": req.top_p,
        "truncation": "disabled",
        "metadata": dict(req.metadata),
    }


def finished(
    base: dict[str, Any], output: Sequence[dict[str, JSON]], stop: StopReason, usage: Usage
) -> dict[str, Any]:
    """The envelope once the model is done: `incomplete` when it ran out of tokens."""
    done = {**base, "output": list(output), "usage": encode_usage(usage)}
    if stop == "length":
        done["status"] = "incomplete"
        done["incomplete_details"] = {"reason": "max_output_tokens"}
    else:
        done["status"] = "completed"
    return done


def encode_response(
    response_id: str, req: ResponsesRequest, resp: ChatResponse, created_at: int
) -> dict[str, Any]:
    """The non-streaming reply of `/v1/responses`."""
    base = envelope(response_id, req, created_at)
    item_prefix = response_id.removeprefix("resp_")
    return finished(base, output_items(resp, item_prefix), resp.stop_reason, resp.usage)
