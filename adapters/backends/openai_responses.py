"""The Responses API half of an `openai_compatible` backend declared `responses: native`:
the Responses door's body forwarded to the upstream's `/responses`, its reply and stream
passed back as they came (adapters/wire/responses/relay.py). Holds no tenant logic; the
gateway keeps conversations itself, so the upstream is always told `store: false`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson

from adapters.backend import BackendCall, RelayedChunk
from adapters.errors import ProviderUnavailable
from adapters.http.upstream import HTTPClient
from adapters.types import JSON, ChatResponse
from adapters.wire.responses import ResponsesRelay, decode_reply, door_edits


def native_body(
    body: Mapping[str, JSON], *, model: str | None, max_tokens: int | None, stream: bool
) -> dict[str, Any]:
    """Deterministic edits only: the backend's model name, the admitted output cap,
    `stream` set or removed, `store: false` (the gateway stores)."""
    out = dict(body)
    if model is not None:
        out["model"] = model
    if max_tokens is not None:
        out["max_output_tokens"] = max_tokens
    out["store"] = False
    out.pop("previous_response_id", None)  # the gateway expanded it into `input`
    if stream:
        out["stream"] = True
    else:
        out.pop("stream", None)
        out.pop("stream_options", None)
    return out


class ResponsesUpstream:
    def __init__(
        self, backend: str, http: HTTPClient, base_url: str, headers: Mapping[str, str]
    ) -> None:
        self._backend = backend
        self._upstream = http.upstream(backend, base_url.rstrip("/") + "/responses", headers)

    async def complete(
        self, call: BackendCall, model: str | None, headers: dict[str, str], timeout_s: float
    ) -> ChatResponse:
        assert call.native_body is not None
        body = native_body(
            call.native_body, model=model, max_tokens=call.request.max_tokens, stream=False
        )
        reply = await self._upstream.post_json(
            orjson.dumps(body), timeout_s=timeout_s, headers=headers
        )
        return decode_reply(reply)

    async def relay(
        self, call: BackendCall, model: str | None, headers: dict[str, str], timeout_s: float
    ) -> AsyncIterator[RelayedChunk]:
        assert call.native_body is not None
        body = native_body(
            call.native_body, model=model, max_tokens=call.request.max_tokens, stream=True
        )
        relay = ResponsesRelay(self._backend, door_edits(call.native_body, call.request.model))
        reads = self._upstream.post_sse_reads(
            orjson.dumps(body), timeout_s=timeout_s, headers=headers
        )
        async for read in reads:
            chunk = relay.feed_all(read)
            if chunk is not None:
                yield chunk
        if not relay.ended:
            raise ProviderUnavailable(self._backend, "stream ended before response.completed")
