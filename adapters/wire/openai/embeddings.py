"""OpenAI's `/embeddings` answer, for backends whose upstream speaks another wire (Bedrock) or
hands back vectors as floats whatever was asked (LiteLLM's providers)."""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from typing import Any


def float32_base64(vector: Sequence[float]) -> str:
    """A vector as OpenAI's `encoding_format: base64` sends it: little-endian float32 bytes."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def embeddings_reply(
    model: str, vectors: Sequence[Sequence[float]], tokens: int, as_base64: bool
) -> dict[str, Any]:
    """The `/embeddings` reply: one `embedding` object per vector, in input order."""
    data = [
        {
            "object": "embedding",
            "index": i,
            "embedding": float32_base64(vector) if as_base64 else list(vector),
        }
        for i, vector in enumerate(vectors)
    ]
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return {"object": "list", "data": data, "model": model, "usage": usage}
