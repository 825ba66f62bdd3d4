"""build_backend: BackendSpec -> live Backend. Heavy clients (LiteLLM, boto3) load only when a
spec of their kind is built."""

from __future__ import annotations

import importlib

from adapters.backend import Backend
from adapters.backends.anthropic_native import AnthropicBackend
from adapters.backends.openai_compatible import OpenAICompatibleBackend
from adapters.backends.spec import BackendSpec
from adapters.http.upstream import HTTPClient


def build_backend(spec: BackendSpec, *, http: HTTPClient) -> Backend:
    """`http` is the process-wide pool (the gateway's lifespan owns and closes it); it picks
    the client for the backend's URL scheme once, here (`UpstreamPool`)."""
    if spec.kind in ("openai_compatible", "selfhost"):
        return OpenAICompatibleBackend(spec, http=http)
    if spec.kind == "anthropic":
        return AnthropicBackend(spec, http=http)
    if spec.kind == "litellm":
        from adapters.backends.litellm_backend import LiteLLMBackend

        return LiteLLMBackend(spec)
    if spec.kind == "bedrock":
        bedrock = importlib.import_module("adapters.backends.bedrock")
        backend: Backend = bedrock.build_bedrock_backend(spec)
        return backend
    raise ValueError(f"backend {spec.name}: unknown kind {spec.kind!r}")
