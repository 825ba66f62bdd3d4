"""The process settings (`lantern.yaml` + `LANTERN_*` env vars): one typed, validated object.

Precedence: explicit overrides (CLI flags) > environment > YAML file > defaults. This module
is the only place that reads `os.environ`. Backend kinds are described in `docs/config.md`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from adapters.backends.spec import DEFAULT_BETAS, SALTED_ENGINES
from policies.errors import DOCUMENT_FIELD, PolicyFileError, PolicyIssue
from policies.loader import YamlDocument, issues_from_errors, parse_yaml

ENV_PREFIX = "LANTERN_"
_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"


class SettingsError(Exception):
    """Settings that cannot be used; `issues` name file (or environment), line, field, reason."""

    def __init__(self, issues: tuple[PolicyIssue, ...]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(issue) for issue in issues))


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TelemetrySettings(_Section):
    exporter: Literal["none", "console", "otlp"] = "none"
    otlp_endpoint: str | None = None  # None: the OpenTelemetry SDK default


class SandboxSettings(_Section):
    """Tool runs (`POST /v1/tools/runs`): the local box, idempotency retention, Fargate."""

    backend: Literal["auto", "bwrap", "unshare"] = "auto"  # auto: bwrap when installed
    lease_s: float = Field(default=30.0, gt=0)  # a run's lease; a dead gateway's run expires
    retention_s: float = Field(default=86400.0, gt=0)  # how long results are replayed
    egress_allow_cidrs: tuple[str, ...] = ()  # private ranges the egress proxy may dial
    # per-run cgroups: auto (a writable v2 tree, else v1), off (rlimits only), or a delegated
    # cgroup v2 directory (then a run never starts without it)
    cgroup_root: str = "auto"
    fargate_region: str | None = None  # set: tools with `runner: fargate` run on ECS
    sweep_interval_s: float = Field(default=300.0, gt=0)


class FleetSettings(_Section):
    """How the router learns each self-hosted replica's load from its engine's `/metrics`."""

    signal_interval_s: float = Field(default=1.0, ge=0)  # 0: never scrape (router counts only)
    signal_timeout_s: float = Field(default=0.5, gt=0)
    signal_max_age_s: float = Field(default=5.0, gt=0)  # older samples are ignored
    health_interval_s: float = Field(default=10.0, gt=0)  # one-token generation probes
    # true: each backend's prefill_tok_s (or the default) is final; false: it is learned
    pin_prefill_tok_s: bool = False
    # with redis_url: session affinity and the prefix index feed shared under this prefix
    shared_key_prefix: str = "lantern:fleet:"
    shared_session_ttl_s: float = Field(default=3600.0, gt=0)  # a shared session's idle life


class HttpSettings(_Section):
    """What one request may cost the gateway before it is refused (the HTTP edge)."""

    # Anthropic's Messages API refuses requests over 32 MB with a 413; OpenAI's cap is similar
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    max_json_depth: int = Field(default=64, ge=8, le=200)  # orjson writes no deeper than 254
    max_messages: int = Field(default=100_000, gt=0)  # Anthropic's per-request message cap
    # larger bodies are parsed, decoded, prepared and counted in a worker thread
    offload_body_bytes: int = Field(default=256 * 1024, ge=0)
    header_timeout_s: float = Field(default=10.0, gt=0)  # connection open -> headers complete
    body_timeout_s: float = Field(default=60.0, gt=0)  # headers complete -> body complete
    # SIGTERM: /ready says 503 for drain_grace_s while still serving (a load balancer stops
    # sending), then the listener closes and calls in flight get drain_timeout_s to finish
    drain_grace_s: float = Field(default=0.0, ge=0)
    drain_timeout_s: float = Field(default=30.0, ge=0)


class ResponsesSettings(_Section):
    """Stored responses of `/v1/responses` (continued with `previous_response_id`): in Redis
    when `redis_url` is set, else in this process (at most `max_entries`, oldest out first)."""

    ttl_s: int = Field(default=30 * 24 * 3600, gt=0)  # OpenAI keeps responses for 30 days
    max_entries: int = Field(default=10_000, gt=0)  # the in-process store only


class PriceOverride(_Section):
    """USD per million tokens; a missing value keeps the price map's own."""

    input: float | None = Field(default=None, ge=0)
    output: float | None = Field(default=None, ge=0)
    cache_read: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)  # a 5-minute cache write
    cache_write_1h: float | None = Field(default=None, ge=0)  # a 1-hour cache write


class _Backend(_Section):
    name: str = Field(pattern=_NAME)
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


class ModelRoute(_Section):
    """A client-facing model name and the backends that can serve it, in preference order."""

    name: str = Field(pattern=_NAME)
    backends: tuple[BackendSettings, ...] = Field(min_length=1)


class Settings(BaseSettings):
    """Everything the process is configured with; built by `load_settings()`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", frozen=True
    )

    config: Path | None = None  # the YAML file (`--config` or LANTERN_CONFIG); not a YAML key
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    database_url: str = "sqlite:///./var/lantern.db"
    redis_url: str | None = None  # None: in-process quota/session/idempotency stores
    policy_dir: Path = Path("./var/policies")
    policy_poll_interval_s: float = Field(default=0.5, gt=0)
    var_dir: Path = Path("./var")  # local state: SQLite file, generated server secret
    admin_token: SecretStr | None = None  # None: /admin routes are disabled
    metrics_token: SecretStr | None = None  # set: /metrics answers 401 without it
    server_secret: SecretStr | None = None  # None: see `resolve_server_secret`
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    telemetry: TelemetrySettings = TelemetrySettings()
    http: HttpSettings = HttpSettings()
    sandbox: SandboxSettings = SandboxSettings()
    fleet: FleetSettings = FleetSettings()
    responses: ResponsesSettings = ResponsesSettings()
    prices: dict[str, PriceOverride] = Field(default_factory=dict)  # model -> USD per Mtok
    models: tuple[ModelRoute, ...] = ()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _YamlFileSource(settings_cls))

    @field_validator("models")
    @classmethod
    def _unique_names(cls, models: tuple[ModelRoute, ...]) -> tuple[ModelRoute, ...]:
        model_names = [route.name for route in models]
        backend_names = [b.name for route in models for b in route.backends]
        for what, names in (("model", model_names), ("backend", backend_names)):
            twice = sorted({name for name in names if names.count(name) > 1})
            if twice:
                raise ValueError(f"{what} names must be unique: {', '.join(twice)} repeated")
        return models

    def model_route(self, name: str) -> ModelRoute | None:
        return next((route for route in self.models if route.name == name), None)

    def resolve_server_secret(
        self, random_bytes: Callable[[int], bytes] = secrets.token_bytes
    ) -> bytes:
        """`server_secret` if set; else `var_dir/secret`, created (mode 0600) on first use."""
        if self.server_secret is not None:
            return self.server_secret.get_secret_value().encode("utf-8")
        path = self.var_dir / "secret"
        if not path.exists():
            self.var_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as handle:
                handle.write(random_bytes(32).hex())
        return path.read_text(encoding="ascii").strip().encode("utf-8")


class _YamlFileSource(PydanticBaseSettingsSource):
    """Values from the YAML file named by the `config` value of the higher-priority sources."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        config = self.current_state.get("config")
        if config is None:
            return {}
        path = Path(config)
        data = _read_yaml(path).data
        if not isinstance(data, dict):
            raise SettingsError((PolicyIssue(str(path), 1, DOCUMENT_FIELD, "expected a mapping"),))
        if "config" in data:
            reason = "not allowed inside the file (use --config or LANTERN_CONFIG)"
            raise SettingsError((PolicyIssue(str(path), 1, "config", reason),))
        return data


def _read_yaml(path: Path) -> YamlDocument:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(
            (PolicyIssue(str(path), 1, DOCUMENT_FIELD, f"cannot read: {exc}"),)
        ) from exc
    try:
        doc = parse_yaml(text, str(path))
    except PolicyFileError as exc:
        raise SettingsError(exc.issues) from exc
    if doc.duplicates:
        raise SettingsError(doc.duplicates)
    return doc


def load_settings(config: Path | str | None = None, **overrides: Any) -> Settings:
    """Build the settings: overrides > LANTERN_* env > YAML (`config` or LANTERN_CONFIG) > defaults.

    Raises `SettingsError` naming file, line and field of each problem.
    """
    init: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
    if config is not None:
        init["config"] = Path(config)
    try:
        return Settings(**init)
    except ValidationError as exc:
        raise SettingsError(_issues(exc, init)) from exc


def _issues(exc: ValidationError, init: Mapping[str, Any]) -> tuple[PolicyIssue, ...]:
    """Place each error in the YAML file when it came from there, else in the environment."""
    from_env = {
        name[len(ENV_PREFIX) :].split("__")[0].lower(): name
        for name in os.environ
        if name.upper().startswith(ENV_PREFIX)
    }
    config = init.get("config") or os.environ.get(f"{ENV_PREFIX}CONFIG")
    doc = _read_yaml(Path(config)) if config else None
    issues: list[PolicyIssue] = []
    in_file: list[ErrorDetails] = []
    for error in exc.errors():
        top = str(error["loc"][0]) if error["loc"] else ""
        if doc is not None and top not in from_env and top not in init:
            in_file.append(error)
            continue
        source = "arguments" if top in init else f"${from_env.get(top, ENV_PREFIX + top.upper())}"
        field = ".".join(str(part) for part in error["loc"]) or DOCUMENT_FIELD
        issues.append(PolicyIssue(source, 0, field, error["msg"]))
    if doc is not None:
        issues.extend(issues_from_errors(in_file, doc, str(config), Settings))
    return tuple(sorted(issues))


def demo_config_path() -> Path:
    """The packaged `gateway/defaults.yaml` used by `lantern serve --demo`."""
    return Path(str(resources.files("gateway").joinpath("defaults.yaml")))


def demo_settings(**overrides: Any) -> Settings:
    """Settings for `lantern serve --demo`: the bundled engine serving `smollm2` on CPU."""
    return load_settings(demo_config_path(), **overrides)
