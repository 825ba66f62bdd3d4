"""BackendSpec: the typed description of one configured backend that `build_backend` turns into
a live Backend. The lead maps settings onto it; secrets arrive already resolved."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

BackendKind = Literal["openai_compatible", "selfhost", "anthropic", "litellm", "bedrock"]
# the OpenAI-compatible servers that accept `cache_salt` (and key their prefix cache with it)
SALTED_ENGINES = frozenset({"vllm", "sglang", "lantern"})
# ... and those that take `top_k` (their sampling extension to OpenAI's chat API)
TOP_K_ENGINES = frozenset({"vllm", "sglang", "lantern"})


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """One backend.

    `base_url`: OpenAI-style for openai_compatible/selfhost (`http://host:port/v1`), the
    provider root for anthropic (`https://api.anthropic.com`), LiteLLM's `api_base` for litellm.
    `model`: the upstream model name (LiteLLM form `anthropic/claude-...` for litellm); None
    forwards the client's model. `api_key`: the secret itself (settings read the env var).
    `extra` keys: `engine` (what serves an openai_compatible URL: "vllm", "sglang", "lantern"
    or "other", the default; selfhost: "lantern"), `send_cache_salt` (bool; default: true for
    the engines that accept it, vllm, sglang and lantern),
    `responses` ("native": forward the Responses door to `/responses`; openai_compatible),
    `anthropic_version` (anthropic), `anthropic_beta` (anthropic, bedrock: the comma-separated
    allow-list of the clients' `anthropic-beta` values forwarded upstream), `region` (bedrock),
    `embeddings` (`titan` or `cohere`) and `input_type` (Cohere's) for Bedrock embedding models.
    """

    name: str
    kind: BackendKind
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    timeout_s: float = 120.0
    extra: Mapping[str, str | int | float | bool] = field(default_factory=dict)


# The betas Claude Code and the Anthropic SDKs send; forwarded unless a backend says otherwise.
DEFAULT_BETAS = (
    "claude-code-20250219",
    "interleaved-thinking-2025-05-14",
    "fine-grained-tool-streaming-2025-05-14",
    "prompt-caching-2024-07-31",
    "context-1m-2025-08-07",
    "token-efficient-tools-2025-02-19",
    "output-128k-2025-02-19",
)


def allowed_betas(spec: BackendSpec) -> frozenset[str]:
    """The backend's allow-list of client betas (`extra.anthropic_beta`, else the defaults)."""
    listed = spec.extra.get("anthropic_beta")
    if listed is None:
        return frozenset(DEFAULT_BETAS)
    return frozenset(b.strip() for b in str(listed).split(",") if b.strip())


def forwarded_betas(client: tuple[str, ...], allowed: frozenset[str]) -> tuple[str, ...]:
    """The client's betas that the allow-list names, in the client's order."""
    return tuple(b for b in client if b in allowed)
