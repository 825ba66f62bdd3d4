"""The factory's entry for `kind: bedrock`: a chat backend, or an embedding one when the
modelId names a Bedrock embedding model (or `extra.embeddings` says which shape it takes)."""

from __future__ import annotations

from adapters.backends.bedrock.backend import BedrockBackend
from adapters.backends.bedrock.embedding_backend import BedrockEmbeddingBackend
from adapters.backends.bedrock.embeddings import COHERE_INPUT_TYPE, embedding_family
from adapters.backends.spec import BackendSpec, allowed_betas


def build_bedrock_backend(spec: BackendSpec) -> BedrockBackend:
    """`model` is the Bedrock modelId, `extra.region`, `base_url` an optional endpoint
    override (tests, VPC endpoints), `extra.cache_points` (default true); for embedding models
    `extra.embeddings` (`titan` or `cohere`, for ARNs that do not name the model) and
    `extra.input_type` (Cohere's, default `search_document`)."""
    if not spec.model:
        raise ValueError(f"backend {spec.name}: model (the Bedrock modelId) is required")
    region = str(spec.extra.get("region", ""))  # empty: the AWS chain (AWS_REGION, config)
    configured = spec.extra.get("embeddings")
    try:
        family = embedding_family(spec.model, None if configured is None else str(configured))
    except ValueError as exc:
        raise ValueError(f"backend {spec.name}: {exc}") from exc
    if family is not None:
        input_type = str(spec.extra.get("input_type", COHERE_INPUT_TYPE))
        return BedrockEmbeddingBackend(
            spec.name, spec.model, region, family, spec.base_url, spec.timeout_s, input_type
        )
    backend = BedrockBackend(
        spec.name,
        spec.model,
        region,
        spec.base_url,
        spec.timeout_s,
        bool(spec.extra.get("cache_points", True)),
    )
    backend.betas = allowed_betas(spec)
    return backend
