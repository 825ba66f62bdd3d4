"""The backends and model routes of `lantern.yaml` (`models:`): one typed model per backend kind.

Each kind is described in `docs/config.md`; `gateway.settings` puts them into the process settings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from adapters.backends.spec import DEFAULT_BETAS, SALTED_ENGINES

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PriceOverride(Section):
    """USD per million tokens (`web_search`: USD per search); a missing value keeps the price
    map's own."""

    input: float | None = Field(default=None, ge=0)
    output: float | None = Field(default=None, ge=0)
    cache_read: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)  # a 5-minute cache write
    cache_write_1h: float | None = Field(default=None, ge=0)  # a 1-hour cache write
    web_search: float | None = Field(default=None, ge=0)  # USD per server-side web search


# the ledger's backend of a sandboxed tool run (gateway/ledger/tool_runs.py): no model backend
# may take it, so a row's backend alone says whether the row is a tool run
RESERVED_BACKEND_PREFIX = "sandbox:"


class _Backend(Section):
    name: str = Field(pattern=NAME_PATTERN)

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        if name.startswith(RESERVED_BACKEND_PREFIX):
            raise ValueError(f"names starting {RESERVED_BACKEND_PREFIX!r} are the tool runs'")
        return name

    timeout_s: float = Field(default=120.0, gt=0)
    price_per_hour_usd: float | None = Field(default=None, ge=0)  # per replica, self-hosted
    replicas: tuple[str, ...] = ()  # base URLs of further replicas of the same engine
    # Self-hosted replicas only: what one replica sustains, for routing and break-even reports.
    prefill_tok_s: float | None = Field(default=None, gt=0)  # the start; the fleet learns it
    capacity_tok_s: float | None = Field(default=None, gt=0)  # tokens/s at full use
    kv_capacity_blocks: int | None = Field(default=None, gt=0)  # 16-token KV blocks
    # prompt + output tokens one call may hold; null: read from the replica's /models card
    max_model_len: int | None = Field(default=None, gt=0)
    # engine load metrics (Prometheus text) under the replica's server root; null: not scraped
    metrics_path: str | None = "/metrics"
    # calls one replica serves at once; more wait in the gateway's fair queue (docs/routing.md).
    # null: the batch size its engine's metrics show (bundled engine, vLLM, SGLang), else none
    max_in_flight: int | None = Field(default=None, gt=0)
    # true: these credentials serve one tenant only (its tenant policy is the only one whose
    # `backends:` names this backend), so the provider's cache is not shared and calls carry
    # no cache-scope line (docs/security.md)
    dedicated_credentials: bool = False

    def api_key(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The key from the env var named by `api_key_env` (None when unset or not used)."""
        env_name = getattr(self, "api_key_env", None)
        if env_name is None:
            return None
        return (os.environ if environ is None else environ).get(env_name)

    def base_urls(self) -> tuple[str, ...]:
        """Every replica's base URL: `base_url` (if any) first, then `replicas`."""
        first = getattr(self, "base_url", None)
        urls = ((first,) if first else ()) + self.replicas
        return tuple(dict.fromkeys(urls))


class OpenAICompatibleBackend(_Backend):
    kind: Literal["openai_compatible"]
    base_url: str | None = None
    model: str
    api_key_env: str | None = None
    # what serves this URL: "vllm", "sglang" and "lantern" (the bundled engine) key their prefix
    # cache with the `cache_salt` Lantern sends; "other" (an API, an unknown server) is sent none
    engine: Literal["vllm", "sglang", "lantern", "other"] = "other"
    # send the tenant's `cache_salt`; null: when `engine` accepts it. Calls not sent it carry the
    # tenant's cache-scope line instead (docs/cache.md)
    cache_salt: bool | None = None
    # "native": the server speaks the Responses API too, and `/v1/responses` calls are forwarded
    # to its `/responses` as they came; "translate" (default): they go to /chat/completions
    responses: Literal["translate", "native"] = "translate"
    # the served model's Hugging Face tokenizer files (tokenizer.json, tokenizer_config.json):
    # prompts are then counted with its tokenizer and chat template, as the server bills them
    tokenizer_dir: Path | None = None

    @property
    def sends_cache_salt(self) -> bool:
        """Whether calls carry `cache_salt`: as configured, else when `engine` accepts it."""
        if self.cache_salt is not None:
            return self.cache_salt
        return self.engine in SALTED_ENGINES

    @field_validator("tokenizer_dir")
    @classmethod
    def _has_tokenizer(cls, path: Path | None) -> Path | None:
        if path is not None and not (path / "tokenizer.json").is_file():
            raise ValueError(f"{path} holds no tokenizer.json")
        return path

    @model_validator(mode="after")
    def _has_url(self) -> OpenAICompatibleBackend:
        if not self.base_urls():
            raise ValueError("needs base_url or replicas")
        return self


class SelfhostBackend(_Backend):
    """The bundled engine: at `base_url`, or started by `lantern serve` from `model_path`."""

    kind: Literal["selfhost"]
    base_url: str | None = None
    model_path: str | None = None  # "default" (the packaged SmolLM2) or a GGUF/safetensors path
    model: str = "smollm2"  # the name the engine serves the model under
    host: str = "127.0.0.1"  # where a child engine listens
    port: int = Field(default=8091, ge=1, le=65535)
    device: Literal["cpu", "cuda"] = "cpu"
    dtype: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> SelfhostBackend:
        has_url = bool(self.base_urls())
        if has_url == (self.model_path is not None):
            raise ValueError("needs exactly one of base_url (or replicas) and model_path")
        return self

    @property
    def is_child_process(self) -> bool:
        return self.model_path is not None


class LiteLLMBackend(_Backend):
    kind: Literal["litellm"]
    model: str  # litellm's provider/model name, e.g. anthropic/claude-sonnet-4-5
    api_base: str | None = None
    api_key_env: str | None = None


class BedrockBackend(_Backend):
    kind: Literal["bedrock"]
    model: str  # Bedrock modelId or inference profile id
    region: str | None = None
    endpoint_url: str | None = None
    # the clients' `anthropic-beta` values forwarded (as Converse's `anthropic_beta` field)
    anthropic_beta: tuple[str, ...] = DEFAULT_BETAS
    # an embedding model's request shape, for a modelId (an ARN) that does not name the model
    embeddings: Literal["titan", "cohere"] | None = None
    # Cohere Embed's `input_type` for every text (OpenAI's API has no such field)
    input_type: Literal["search_document", "search_query", "classification", "clustering"] = (
        "search_document"
    )


class AnthropicBackend(_Backend):
    kind: Literal["anthropic"]
    base_url: str = "https://api.anthropic.com"
    model: str
    api_key_env: str | None = "ANTHROPIC_API_KEY"
    # the clients' `anthropic-beta` values forwarded upstream; others are dropped
    anthropic_beta: tuple[str, ...] = DEFAULT_BETAS


BackendSettings = Annotated[
    OpenAICompatibleBackend | SelfhostBackend | LiteLLMBackend | BedrockBackend | AnthropicBackend,
    Field(discriminator="kind"),
]


class ModelRoute(Section):
    """A client-facing model name and the backends that can serve it, in preference order."""

    name: str = Field(pattern=NAME_PATTERN)
    backends: tuple[BackendSettings, ...] = Field(min_length=1)
