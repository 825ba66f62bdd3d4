"""A Bedrock embedding model behind `EmbeddingBackend`: OpenAI `/embeddings` bodies through
boto3's `invoke_model`, one call per Titan text (at most `PARALLEL_CALLS` at once) or per 96
Cohere texts, the vectors in input order and the token counts summed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from adapters.backend import EmbeddingReply
from adapters.backends.bedrock.backend import BedrockBackend
from adapters.backends.bedrock.embeddings import (
    COHERE_INPUT_TYPE,
    Family,
    invoke_bodies,
    read_ask,
    tokens_of,
    vectors_of,
)
from adapters.backends.bedrock.errors import map_error
from adapters.errors import ProviderUnavailable
from adapters.types import JSON
from adapters.wire.openai import embeddings_reply

PARALLEL_CALLS = 8  # InvokeModel calls in flight for one request's Titan texts

_Reply = tuple[Mapping[str, Any], Mapping[str, str]]  # the JSON body and the HTTP headers


class BedrockEmbeddingBackend(BedrockBackend):
    """Chat calls still go to Converse (Bedrock refuses them for an embedding model)."""

    def __init__(
        self,
        name: str,
        model_id: str,
        region: str,
        family: Family,
        endpoint_url: str | None = None,
        timeout_s: float = 120,
        input_type: str = COHERE_INPUT_TYPE,
    ) -> None:
        super().__init__(name, model_id, region, endpoint_url, timeout_s, cache_points=False)
        self.family: Family = family
        self.input_type = input_type  # Cohere's `input_type` for every text

    def check_embedding(self, body: Mapping[str, JSON]) -> None:
        """The 400 (`WireFormatError`) `embed` would raise, before anything is reserved."""
        read_ask(self.family, self.model_id, body)

    async def embed(
        self, body: Mapping[str, JSON], timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> EmbeddingReply:
        """A 400 (`WireFormatError`) names a field Bedrock cannot honour before any call.
        `headers` reach each InvokeModel request (botocore's `before-call` hook)."""
        ask = read_ask(self.family, self.model_id, body)
        payloads = invoke_bodies(self.family, ask, self.input_type)
        limit = asyncio.Semaphore(PARALLEL_CALLS)

        async def one(payload: dict[str, Any]) -> _Reply:
            async with limit:
                return await asyncio.to_thread(self._invoke, payload, headers)

        try:
            replies = await asyncio.wait_for(
                asyncio.gather(*(one(p) for p in payloads)), min(timeout_s, self.timeout_s)
            )
        except Exception as exc:
            raise map_error(self.name, exc) from exc
        vectors: list[list[float]] = []
        tokens = 0
        for reply, reply_headers in replies:
            count = tokens_of(self.family, reply, reply_headers)
            if count is None:
                raise ProviderUnavailable(self.name, "InvokeModel reply without a token count")
            vectors.extend(vectors_of(self.family, reply))
            tokens += count
        if len(vectors) != len(ask.texts):
            raise ProviderUnavailable(
                self.name, f"{len(vectors)} vectors for {len(ask.texts)} inputs"
            )
        model = body.get("model")
        out = embeddings_reply(
            model if isinstance(model, str) else self.model_id, vectors, tokens, ask.as_base64
        )
        return EmbeddingReply(out, tokens)

    def _invoke(self, payload: dict[str, Any], headers: Mapping[str, str] | None) -> _Reply:
        kwargs: dict[str, Any] = {
            "modelId": self.model_id,
            "body": json.dumps(payload).encode(),
            "contentType": "application/json",
            "accept": "application/json",
        }
        reply = self._call("invoke_model", kwargs, headers)
        data = json.loads(reply["body"].read())
        headers = reply.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        if not isinstance(data, dict):
            raise ProviderUnavailable(self.name, "InvokeModel reply is not a JSON object")
        return data, headers
