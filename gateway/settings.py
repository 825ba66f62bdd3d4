"""The process settings (`lantern.yaml` + `LANTERN_*` env vars): one typed, validated object.

Precedence: explicit overrides (CLI flags) > environment > YAML file > defaults. This module
and `gateway.backend_settings` (the backends under `models:`, and their API keys' variables)
are the only places that read `os.environ`. Backend kinds are described in `docs/config.md`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path, PurePath
from typing import Any, Literal

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from sqlalchemy.engine import make_url

from gateway.backend_settings import (
    ModelRoute,
    PriceOverride,
    Section,
)
from gateway.mcp_settings import McpServerSettings, McpSettings
from policies.errors import DOCUMENT_FIELD, PolicyFileError, PolicyIssue
from policies.loader import YamlDocument, issues_from_errors, parse_yaml

ENV_PREFIX = "LANTERN_"


class SettingsError(Exception):
    """Settings that cannot be used; `issues` name file (or environment), line, field, reason."""

    def __init__(self, issues: tuple[PolicyIssue, ...]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(issue) for issue in issues))


class TelemetrySettings(Section):
    exporter: Literal["none", "console", "otlp"] = "none"
    otlp_endpoint: str | None = None  # None: the OpenTelemetry SDK default
    service_name: str = "lantern"  # the spans' resource `service.name`


class RunnerPriceSettings(Section):
    """What a tool run costs on one runner: USD per vCPU-hour and per GB-hour, over its seconds
    rounded up to the whole second and raised to `min_billed_s` (docs/sandbox.md#billing)."""

    vcpu_hour_usd: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    gb_hour_usd: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    min_billed_s: float = Field(default=0.0, ge=0, le=86400)


class ToolRunPriceSettings(Section):
    """`sandbox.prices`: local boxes free unless priced; Fargate at AWS's on-demand Linux/x86
    price (us-east-1), which bills a task's seconds with a one-minute minimum."""

    local: RunnerPriceSettings = RunnerPriceSettings()
    fargate: RunnerPriceSettings = RunnerPriceSettings(
        vcpu_hour_usd=0.04048, gb_hour_usd=0.004445, min_billed_s=60.0
    )


class SandboxSettings(Section):
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
    # where the runs are stored; None: beside a SQLite ledger in its own file, else the
    # ledger's database (`Settings.tool_store_url`)
    database_url: str | None = None
    prices: ToolRunPriceSettings = ToolRunPriceSettings()  # each run's ledger row


class FleetSettings(Section):
    """How the router learns each self-hosted replica's load from its engine's `/metrics`."""

    signal_interval_s: float = Field(default=1.0, ge=0)  # 0: never scrape (router counts only)
    signal_timeout_s: float = Field(default=0.5, gt=0)
    signal_max_age_s: float = Field(default=5.0, gt=0)  # older samples are ignored
    health_interval_s: float = Field(default=10.0, gt=0)  # free probes (/health, /models)
    # a replica with no free health endpoint: a one-token generation at most this often
    paid_probe_interval_s: float = Field(default=300.0, ge=0)
    # true: each backend's prefill_tok_s (or the default) is final; false: it is learned
    pin_prefill_tok_s: bool = False
    # with redis_url: session affinity and the prefix index feed shared under this prefix
    shared_key_prefix: str = "lantern:fleet:"
    shared_session_ttl_s: float = Field(default=3600.0, gt=0)  # a shared session's idle life
    # with redis_url: a replica slot's lease; a dead process's slots come back after it
    shared_slot_lease_s: float = Field(default=15.0, gt=0)


class HttpSettings(Section):
    """What one request may cost the gateway before it is refused (the HTTP edge)."""

    # Anthropic's Messages API refuses requests over 32 MB with a 413; OpenAI's cap is similar
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    max_json_depth: int = Field(default=64, ge=8, le=200)  # orjson writes no deeper than 254
    max_messages: int = Field(default=100_000, gt=0)  # Anthropic's per-request message cap
    # larger bodies are parsed, decoded, prepared and counted in a worker thread
    offload_body_bytes: int = Field(default=256 * 1024, ge=0)
    header_timeout_s: float = Field(default=10.0, gt=0)  # connection open -> headers complete
    body_timeout_s: float = Field(default=60.0, gt=0)  # headers complete -> body complete
    # an idle connection is kept this long between requests: longer than clients keep theirs
    # pooled (httpx 5 s, aiohttp 15 s) and than a load balancer's idle timeout (ALB 60 s), so the
    # gateway never closes a connection as a client sends on it ("Server disconnected")
    keep_alive_s: int = Field(default=65, gt=0)
    # SIGTERM: /ready says 503 for drain_grace_s while still serving (a load balancer stops
    # sending), then the listener closes and calls in flight get drain_timeout_s to finish
    drain_grace_s: float = Field(default=0.0, ge=0)
    drain_timeout_s: float = Field(default=30.0, ge=0)


class ResponsesSettings(Section):
    """Stored responses of `/v1/responses` (continued with `previous_response_id`): in Redis
    when `redis_url` is set (at most `max_entries` and `max_bytes` per tenant), else in this
    process (as many in all; the tenant holding the most loses its oldest first)."""

    ttl_s: int = Field(default=30 * 24 * 3600, gt=0)  # OpenAI keeps responses for 30 days
    max_entries: int = Field(default=10_000, gt=0)
    # each entry holds its whole conversation so far: the bytes are what bounds memory
    max_bytes: int = Field(default=1024 * 1024 * 1024, gt=0)


class ReplaySettings(Section):
    """`Idempotency-Key` on the model doors (docs/idempotency.md): records in Redis when
    `redis_url` is set (every process shares them), else in this process."""

    retention_s: float = Field(default=86400.0, gt=0)  # how long a reply is replayed
    lease_s: float = Field(default=30.0, gt=0)  # a dead gateway's call is taken over after it
    wait_s: float = Field(default=30.0, ge=0)  # a retry waits this long for a running call
    max_reply_bytes: int = Field(default=4 * 1024 * 1024, gt=0)  # larger: served, not stored
    sweep_interval_s: float = Field(default=60.0, gt=0)  # the in-process store's expiry pass
    # in-process: records in all, past it the tenant holding the most loses its oldest;
    # in Redis: each tenant's records (every process together), past it it loses its oldest
    max_records: int = Field(default=10_000, gt=0)
    # the same bound on the bytes of the stored replies (records times max_reply_bytes would
    # be 40 GiB): what holds memory, and one tenant's share of the Redis quotas live in
    max_bytes: int = Field(default=256 * 1024 * 1024, gt=0)

    @model_validator(mode="after")
    def _holds_a_whole_reply(self) -> ReplaySettings:
        if self.max_bytes < self.max_reply_bytes:
            raise ValueError("replay.max_bytes must be at least replay.max_reply_bytes")
        return self


class ConsoleSettings(Section):
    """The web console's logins (`docs/console.md`): stored in the ledger database."""

    # a login's life (at most a year: the expiry must fit in a datetime); logout ends it sooner
    session_ttl_s: int = Field(default=8 * 3600, gt=0, le=366 * 86400)
    max_sessions: int = Field(default=64, gt=0)  # live logins kept; the oldest is closed first
    # true: the cookie is sent over HTTPS only (set it where TLS ends before the gateway or at it)
    secure_cookie: bool = False
    max_login_failures: int = Field(default=10, gt=0)  # wrong tokens per client address ...
    login_window_s: float = Field(default=300.0, gt=0)  # ... per window; then 429 till its end


class ApiKeySettings(Section):
    """Keys issued over `/admin/keys` and the console (`docs/console.md`)."""

    # a revoked or expired key stays listed (and its id taken) this long, then is deleted; its
    # audit rows stay. At most 100 years: the cut-off must fit in a datetime
    retention_days: int = Field(default=90, gt=0, le=36_500)
    # keys a tenant may hold at once (neither revoked nor expired); one more is a 409
    max_live_per_tenant: int = Field(default=1000, gt=0)


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
    replay: ReplaySettings = ReplaySettings()
    console: ConsoleSettings = ConsoleSettings()
    api_keys: ApiKeySettings = ApiKeySettings()
    mcp: McpSettings = McpSettings()  # the /mcp door (gateway/mcp/, docs/mcp.md)
    mcp_servers: tuple[McpServerSettings, ...] = ()  # upstream MCP servers tenants may be granted
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

    @field_validator("mcp_servers")
    @classmethod
    def _unique_servers(
        cls, servers: tuple[McpServerSettings, ...]
    ) -> tuple[McpServerSettings, ...]:
        names = [server.name for server in servers]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"MCP server names must be unique: {', '.join(twice)} repeated")
        return servers

    def model_route(self, name: str) -> ModelRoute | None:
        return next((route for route in self.models if route.name == name), None)

    def tool_store_url(self) -> str:
        """The tool-run store's database: `sandbox.database_url`, else for a SQLite ledger file
        `<name>-tool-runs<suffix>` beside it (a second handle on the ledger's own file would
        drop SQLite's locks on it when closed), else the ledger's database."""
        if self.sandbox.database_url is not None:
            return self.sandbox.database_url
        url = make_url(self.database_url)
        name = url.database or ""
        if url.get_backend_name() != "sqlite" or name in ("", ":memory:"):
            return self.database_url
        if name.startswith("file:") or url.query.get("uri"):
            return self.database_url
        path = PurePath(name)
        store = path.with_name(f"{path.stem}-tool-runs{path.suffix}")
        return url.set(database=str(store)).render_as_string(hide_password=False)

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
