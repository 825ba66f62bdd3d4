"""OpenAI `/embeddings` bodies ↔ Bedrock InvokeModel bodies for the embedding models Bedrock
serves: Amazon Titan Text Embeddings (v1, v2) and Cohere Embed (v3).

Titan embeds one text per InvokeModel, so an OpenAI `input` list becomes one call per text,
their token counts summed; Cohere takes up to 96 texts per call. Every OpenAI field is either
honoured or refused by name (`WireFormatError`, a 400): token-array inputs, `dimensions` where
the model has no such setting, `user` (InvokeModel has no slot for it), and any other field.

Pure encoding and decoding: no boto3, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from adapters.errors import WireFormatError

Family = Literal["titan", "cohere"]

COHERE_MAX_TEXTS = 96  # Cohere Embed's limit of texts per call
COHERE_INPUT_TYPE = "search_document"  # Cohere requires one; OpenAI has no such field
TOKEN_COUNT_HEADER = "x-amzn-bedrock-input-token-count"  # on every InvokeModel reply
_FIELDS = frozenset({"model", "input", "encoding_format", "dimensions"})


def embedding_family(model_id: str, configured: str | None = None) -> Family | None:
    """Which request shape a Bedrock model embeds with: `configured` (the backend's
    `extra.embeddings`, for ARNs that do not name the model) or the modelId's own name; None
    for a model that does not embed. Cross-region profiles (`us.cohere.…`) count too."""
    if configured is not None:
        if configured not in ("titan", "cohere"):
            raise ValueError(f"embeddings: expected 'titan' or 'cohere', not {configured!r}")
        return "titan" if configured == "titan" else "cohere"
    name = model_id.rsplit("/", 1)[-1]
    for prefix in ("", "us.", "eu.", "apac.", "global."):
        if name.startswith(prefix + "amazon.titan-embed-text"):
            return "titan"
        if name.startswith(prefix + "cohere.embed-"):
            return "cohere"
    return None


@dataclass(frozen=True, slots=True)
class EmbeddingAsk:
    """What an OpenAI embeddings body asks of Bedrock: the texts, the vector size (None: the
    model's default) and whether vectors go back as base64 float32 (OpenAI's `base64`)."""

    texts: tuple[str, ...]
    dimensions: int | None
    as_base64: bool


def read_ask(family: Family, model_id: str, body: Mapping[str, Any]) -> EmbeddingAsk:
    """The client's body checked field by field; a WireFormatError names the first field
    Bedrock cannot honour."""
    for field in body:
        if field not in _FIELDS:
            raise WireFormatError(field, f"Bedrock embeddings ({model_id}) take no such field")
    value = body.get("input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise WireFormatError(
            "input", f"Bedrock embeddings ({model_id}) take a string or a list of strings"
        )
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise WireFormatError("encoding_format", "expected 'float' or 'base64'")
    dimensions = body.get("dimensions")
    if dimensions is not None:
        if not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1:
            raise WireFormatError("dimensions", "expected a positive integer")
        if family != "titan" or "embed-text-v1" in model_id:
            raise WireFormatError("dimensions", f"{model_id} has a fixed vector size")
    return EmbeddingAsk(tuple(texts), dimensions, fmt == "base64")


def invoke_bodies(family: Family, ask: EmbeddingAsk, input_type: str) -> list[dict[str, Any]]:
    """The InvokeModel JSON bodies, in input order (Titan: one per text; Cohere: one per 96)."""
    if family == "titan":
        extra: dict[str, Any] = {} if ask.dimensions is None else {"dimensions": ask.dimensions}
        return [{"inputText": text, **extra} for text in ask.texts]
    return [
        {"texts": list(ask.texts[i : i + COHERE_MAX_TEXTS]), "input_type": input_type}
        for i in range(0, len(ask.texts), COHERE_MAX_TEXTS)
    ]


def vectors_of(family: Family, reply: Mapping[str, Any]) -> list[list[float]]:
    """The vectors of one InvokeModel reply (Titan: one; Cohere: one per text sent)."""
    if family == "titan":
        vector = reply.get("embedding")
        return [vector] if isinstance(vector, list) else []
    vectors = reply.get("embeddings")
    return vectors if isinstance(vectors, list) else []


def tokens_of(family: Family, reply: Mapping[str, Any], headers: Mapping[str, str]) -> int | None:
    """The input tokens Bedrock bills for one reply: Titan's `inputTextTokenCount`, else the
    InvokeModel reply's token-count header; None when neither is there."""
    if family == "titan" and isinstance(reply.get("inputTextTokenCount"), int):
        return int(reply["inputTextTokenCount"])
    raw = headers.get(TOKEN_COUNT_HEADER)
    return int(raw) if raw is not None and raw.isdigit() else None
