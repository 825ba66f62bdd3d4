"""BackendSpec: the typed description of one configured backend that `build_backend` turns into
a live Backend. The lead maps settings onto it; secrets arrive already resolved."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

BackendKind = Literal["openai_compatible", "selfhost", "anthropic", "litellm", "bedrock"]


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """One backend.

    `base_url`: OpenAI-style for openai_compatible/selfhost (`http://host:port/v1`), the
    provider root for anthropic (`https://api.anthropic.com`), LiteLLM's `api_base` for litellm.
    `model`: the upstream model name (LiteLLM form `anthropic/claude-...` for litellm); None
    forwards the client's model. `api_key`: the secret itself (settings read the env var).
    `extra` keys: `send_cache_salt` (bool; default true for openai_compatible/selfhost),
    `responses` ("native": forward the Responses door to `/responses`; openai_compatible),
    `anthropic_version`, `anthropic_beta` (anthropic), `region` (bedrock).
    """

    name: str
    kind: BackendKind
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    timeout_s: float = 120.0
    extra: Mapping[str, str | int | float | bool] = field(default_factory=dict)
