"""Backend for providers reached through LiteLLM's SDK (`litellm.acompletion`, and
`litellm.aembedding` for `/v1/embeddings`).

The slow path by design (LiteLLM costs ~15-40 ms CPU per call): used for providers Lantern has
no native codec for. Retries are off; fallback is the router's job.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from types import ModuleType
from typing import Any

from adapters.backend import BackendCall, EmbeddingReply
from adapters.backends.spec import BackendSpec
from adapters.errors import (
    ProviderRateLimited,
    ProviderRejected,
    ProviderTimeout,
    ProviderUnavailable,
    UpstreamError,
    WireFormatError,
    malformed_reply,
)
from adapters.http.upstream import parse_retry_after
from adapters.pricing import import_litellm_offline
from adapters.types import JSON, ChatResponse, StreamEvent, WireFormat
from adapters.wire import openai as openai_wire
from adapters.wire.openai import OpenAIStreamDecoder, embeddings_reply

# OpenAI's embeddings fields; LiteLLM maps each to the provider or refuses it
EMBEDDING_FIELDS = frozenset({"model", "input", "dimensions", "encoding_format", "user"})

# OpenAI chat fields that change what comes back. LiteLLM drops what its provider cannot take
# (`drop_params`); the gateway refuses those by name first, from LiteLLM's own list of what the
# provider supports. Fields that only describe the call (`user`, `metadata`,
# `prompt_cache_key`, `safety_identifier`) are not among them: dropping one changes no output.
SHAPING_FIELDS = (
    "n",
    "logprobs",
    "top_logprobs",
    "seed",
    "response_format",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "tools",
    "tool_choice",
    "functions",
    "function_call",
    "reasoning_effort",
    "modalities",
    "audio",
    "prediction",
    "web_search_options",
)


def _headers_of(exc: Exception) -> Mapping[str, str]:
    """The upstream's response headers: LiteLLM keeps them in `litellm_response_headers`."""
    for headers in (
        getattr(exc, "litellm_response_headers", None),
        getattr(getattr(exc, "response", None), "headers", None),
    ):
        if headers:
            return headers
    return {}


def map_litellm_error(litellm: ModuleType, backend: str, exc: Exception) -> UpstreamError:
    """LiteLLM's exception classes (and their status codes) -> our typed errors."""
    detail = f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"
    status = getattr(exc, "status_code", None)
    if isinstance(exc, litellm.Timeout):
        return ProviderTimeout(backend, detail, status)
    if isinstance(exc, litellm.RateLimitError):
        return ProviderRateLimited(backend, detail, 429, parse_retry_after(_headers_of(exc)))
    if isinstance(
        exc,
        litellm.APIConnectionError
        | litellm.ServiceUnavailableError
        | litellm.InternalServerError
        | litellm.BadGatewayError,
    ):
        return ProviderUnavailable(backend, detail, status)
    if isinstance(
        exc,
        litellm.BadRequestError
        | litellm.AuthenticationError
        | litellm.PermissionDeniedError
        | litellm.NotFoundError
        | litellm.UnprocessableEntityError,
    ):
        return ProviderRejected(backend, detail, status)
    if isinstance(status, int) and 400 <= status < 500 and status not in (408, 429):
        return ProviderRejected(backend, detail, status)
    return ProviderUnavailable(backend, detail, status if isinstance(status, int) else None)


class LiteLLMBackend:
    wire: WireFormat | None = None

    def __init__(self, spec: BackendSpec) -> None:
        self.name: str = spec.name
        self.kind: str = spec.kind
        self._spec = spec
        self._litellm = import_litellm_offline()
        self.unsupported_fields = unsupported_fields(self._litellm, spec.model)
        self.embeds = may_embed(self._litellm, spec.model)

    def _kwargs(self, call: BackendCall, stream: bool) -> dict[str, Any]:
        """OpenAI-format kwargs: the client's raw OpenAI body, or the canonical request encoded
        with cache markers kept (LiteLLM maps them to providers that cache)."""
        if call.raw_body is not None and call.client_wire == "openai":
            kwargs = dict(call.raw_body)
        else:
            kwargs = openai_wire.encode_request(call.request, cache_control=True)
        kwargs.pop("stream", None)
        kwargs.pop("stream_options", None)
        spec = self._spec
        kwargs.update(
            model=spec.model or kwargs["model"],
            num_retries=0,
            max_retries=0,
            timeout=min(call.timeout_s, spec.timeout_s),
            drop_params=True,
        )
        if spec.base_url:
            kwargs["api_base"] = spec.base_url
        if spec.api_key:
            kwargs["api_key"] = spec.api_key
        if call.extra_headers:
            kwargs["extra_headers"] = dict(call.extra_headers)
        if stream:
            kwargs.update(stream=True, stream_options={"include_usage": True})
        return kwargs

    async def complete(self, call: BackendCall) -> ChatResponse:
        try:
            resp = await self._litellm.acompletion(**self._kwargs(call, stream=False))
        except Exception as exc:
            raise map_litellm_error(self._litellm, self.name, exc) from exc
        try:
            return openai_wire.decode_response(resp.model_dump())
        except WireFormatError as exc:
            raise malformed_reply(self.name, exc) from exc

    async def stream(self, call: BackendCall) -> AsyncIterator[StreamEvent]:
        decoder = OpenAIStreamDecoder(self.name)
        try:
            chunks = await self._litellm.acompletion(**self._kwargs(call, stream=True))
            async for chunk in chunks:
                for event in decoder.feed_chunk(chunk.model_dump()):
                    yield event
        except UpstreamError:
            raise
        except Exception as exc:
            raise map_litellm_error(self._litellm, self.name, exc) from exc
        for event in decoder.finish():
            yield event

    def check_embedding(self, body: Mapping[str, JSON]) -> None:
        """A field OpenAI's embeddings API lacks: a 400 naming it, before anything is reserved
        (what the provider cannot take only LiteLLM knows, at call time)."""
        for field in body:
            if field not in EMBEDDING_FIELDS:
                raise WireFormatError(field, "OpenAI's embeddings API has no such field")

    async def embed(
        self, body: Mapping[str, JSON], timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> EmbeddingReply:
        """`litellm.aembedding` with the client's fields, `drop_params` off: a field the
        provider cannot take is LiteLLM's `UnsupportedParamsError`, a 400, never dropped. The
        reply in OpenAI's shape (vectors as base64 when asked, whatever the provider sent)."""
        self.check_embedding(body)
        spec = self._spec
        kwargs: dict[str, Any] = {k: v for k, v in body.items() if k != "model"}
        kwargs.update(
            model=spec.model or body.get("model"),
            num_retries=0,
            max_retries=0,
            timeout=min(timeout_s, spec.timeout_s),
            drop_params=False,
        )
        if spec.base_url:
            kwargs["api_base"] = spec.base_url
        if spec.api_key:
            kwargs["api_key"] = spec.api_key
        if headers:
            kwargs["extra_headers"] = dict(headers)
        try:
            reply = (await self._litellm.aembedding(**kwargs)).model_dump()
        except Exception as exc:
            raise map_litellm_error(self._litellm, self.name, exc) from exc
        tokens = (reply.get("usage") or {}).get("prompt_tokens")
        data = reply.get("data")
        if not isinstance(tokens, int) or not isinstance(data, list):
            raise ProviderUnavailable(self.name, "embeddings reply without data or usage")
        vectors = [item["embedding"] for item in sorted(data, key=lambda d: d["index"])]
        if any(isinstance(v, str) for v in vectors):  # already base64, as asked
            return EmbeddingReply({**reply, "usage": _usage(tokens)}, tokens)
        model = body.get("model")
        as_base64 = body.get("encoding_format") == "base64"
        out = embeddings_reply(model if isinstance(model, str) else "", vectors, tokens, as_base64)
        return EmbeddingReply(out, tokens)

    async def aclose(self) -> None:
        """LiteLLM keeps its own client cache; nothing of ours to close."""


def _usage(tokens: int) -> dict[str, int]:
    return {"prompt_tokens": tokens, "total_tokens": tokens}


def may_embed(litellm: ModuleType, model: str | None) -> bool:
    """False when LiteLLM's model map knows `model` as anything but an embedding model (a
    `/v1/embeddings` call is then refused before anything is reserved, as for any backend that
    cannot embed); True where it does not know the model: the provider decides."""
    if not model:
        return True
    try:
        mode = litellm.get_model_info(model).get("mode")
    except Exception:  # not in LiteLLM's map: it raises rather than answering None
        return True
    return mode in (None, "embedding")


def unsupported_fields(litellm: ModuleType, model: str | None) -> frozenset[str]:
    """The shaping fields LiteLLM says the provider of `model` does not take (none where LiteLLM
    does not know the provider: it then passes every field on)."""
    if not model:
        return frozenset()
    try:
        supported = litellm.get_supported_openai_params(model=model)
    except Exception:  # an unknown provider prefix: LiteLLM raises rather than answering None
        supported = None
    if supported is None:
        return frozenset()
    return frozenset(f for f in SHAPING_FIELDS if f not in supported)
