"""Settings: YAML file, LANTERN_* env overrides, unknown keys with file/line, demo defaults."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gateway.backend_settings import (
    RESERVED_BACKEND_PREFIX,
    BedrockBackend,
    OpenAICompatibleBackend,
    SelfhostBackend,
)
from gateway.ledger.tool_runs import TOOL_RUN_BACKEND
from gateway.settings import (
    SettingsError,
    demo_settings,
    load_settings,
)

CONFIG = """\
host: 0.0.0.0
port: 9000
database_url: postgresql+psycopg://u@db/lantern
policy_dir: /etc/lantern/policies
admin_token: s3cret
telemetry:
  exporter: otlp
  otlp_endpoint: http://collector:4318
prices:
  gpt-4o-mini: {input: 0.15, output: 0.6}
models:
  - name: gpt-4o-mini
    backends:
      - kind: openai_compatible
        name: local-vllm
        base_url: http://127.0.0.1:9000/v1
        model: gpt-4o-mini
        api_key_env: VLLM_KEY
        timeout_s: 30
        price_per_hour_usd: 2.5
        replicas: [http://127.0.0.2:9000/v1]
      - {kind: bedrock, name: bedrock-haiku, model: anthropic.claude-3-haiku, region: us-east-1}
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LANTERN_CONFIG", "LANTERN_PORT", "LANTERN_HOST", "LANTERN_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lantern.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_a_file() -> None:
    settings = load_settings()
    assert (settings.host, settings.port) == ("127.0.0.1", 8080)
    assert settings.database_url == "sqlite:///./var/lantern.db"
    assert settings.redis_url is None
    assert settings.policy_dir == Path("var/policies")
    assert settings.telemetry.exporter == "none"
    assert settings.models == ()


def test_yaml_file_values(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, CONFIG))
    assert (settings.host, settings.port) == ("0.0.0.0", 9000)
    assert settings.database_url == "postgresql+psycopg://u@db/lantern"
    assert settings.policy_dir == Path("/etc/lantern/policies")
    assert settings.admin_token is not None
    assert settings.admin_token.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(settings)
    assert settings.telemetry.otlp_endpoint == "http://collector:4318"
    assert (settings.prices["gpt-4o-mini"].input, settings.prices["gpt-4o-mini"].output) == (
        0.15,
        0.6,
    )
    assert settings.prices["gpt-4o-mini"].cache_read is None
    route = settings.model_route("gpt-4o-mini")
    assert route is not None
    vllm, bedrock = route.backends
    assert isinstance(vllm, OpenAICompatibleBackend)
    assert vllm.base_urls() == ("http://127.0.0.1:9000/v1", "http://127.0.0.2:9000/v1")
    assert (vllm.timeout_s, vllm.price_per_hour_usd) == (30.0, 2.5)
    assert vllm.api_key({"VLLM_KEY": "abc"}) == "abc"
    assert vllm.api_key({}) is None
    assert isinstance(bedrock, BedrockBackend)
    assert (bedrock.model, bedrock.region, bedrock.endpoint_url) == (
        "anthropic.claude-3-haiku",
        "us-east-1",
        None,
    )
    assert settings.model_route("other") is None


def test_env_overrides_file_and_overrides_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, CONFIG)
    monkeypatch.setenv("LANTERN_CONFIG", str(path))
    monkeypatch.setenv("LANTERN_PORT", "9100")
    monkeypatch.setenv("LANTERN_REDIS_URL", "redis://127.0.0.1:6379/3")
    monkeypatch.setenv("LANTERN_TELEMETRY__EXPORTER", "console")
    settings = load_settings()
    assert settings.config == path
    assert settings.port == 9100
    assert settings.redis_url == "redis://127.0.0.1:6379/3"
    # nested env merges with the file: the endpoint still comes from YAML
    assert (settings.telemetry.exporter, settings.telemetry.otlp_endpoint) == (
        "console",
        "http://collector:4318",
    )
    assert settings.host == "0.0.0.0"
    assert load_settings(port=9200).port == 9200  # CLI flags beat the environment


def test_unknown_key_names_file_line_and_field(tmp_path: Path) -> None:
    path = write(
        tmp_path, CONFIG.replace("  exporter: otlp\n", "  exporter: otlp\n  sampler: all\n")
    )
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert [str(issue) for issue in caught.value.issues] == [
        f"{path}:8: telemetry.sampler: unknown key (allowed: exporter, otlp_endpoint, service_name)"
    ]


def test_unknown_backend_key_and_wrong_type(tmp_path: Path) -> None:
    text = CONFIG.replace(
        "        timeout_s: 30\n", "        timeout_s: soon\n        retries: 3\n"
    )
    path = write(tmp_path, text)
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert [str(issue) for issue in caught.value.issues] == [
        f"{path}:19: models[0].backends[0].timeout_s: "
        "Input should be a valid number, unable to parse string as a number",
        f"{path}:20: models[0].backends[0].retries: unknown key (allowed: api_key_env, base_url, "
        "cache_salt, capacity_tok_s, dedicated_credentials, engine, kind, kv_capacity_blocks, max_in_flight, "
        "max_model_len, metrics_path, model, name, prefill_tok_s, price_per_hour_usd, replicas, responses, "
        "timeout_s, tokenizer_dir)",
    ]


def test_bad_env_value_is_blamed_on_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANTERN_PORT", "eighty")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert [str(issue) for issue in caught.value.issues] == [
        "$LANTERN_PORT: port: Input should be a valid integer, unable to parse string as an integer"
    ]


def test_backend_rules(tmp_path: Path) -> None:
    text = (
        "models:\n"
        "  - name: a\n"
        "    backends:\n"
        "      - {kind: selfhost, name: s1, model_path: default, base_url: http://x}\n"
        "      - {kind: openai_compatible, name: o1, model: m}\n"
        "      - {kind: grpc, name: g}\n"
    )
    path = write(tmp_path, text)
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert [str(issue) for issue in caught.value.issues] == [
        f"{path}:4: models[0].backends[0]: needs exactly one of base_url (or replicas) and model_path",
        f"{path}:5: models[0].backends[1]: needs base_url or replicas",
        f"{path}:6: models[0].backends[2]: Input tag 'grpc' found using 'kind' does not match any "
        "of the expected tags: 'openai_compatible', 'selfhost', 'litellm', 'bedrock', 'anthropic'",
    ]


def test_names_must_be_unique(tmp_path: Path) -> None:
    backend = "{kind: litellm, name: same, model: anthropic/claude-sonnet-4-5}"
    text = (
        f"models:\n  - {{name: a, backends: [{backend}]}}\n  - {{name: a, backends: [{backend}]}}\n"
    )
    path = write(tmp_path, text)
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert [str(issue) for issue in caught.value.issues] == [
        f"{path}:1: models: model names must be unique: a repeated"
    ]


def test_duplicate_yaml_key_and_missing_file(tmp_path: Path) -> None:
    path = write(tmp_path, "port: 1\nport: 2\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert [str(i) for i in caught.value.issues] == [
        f"{path}:2: port: duplicate key 'port' (first at line 1)"
    ]
    with pytest.raises(SettingsError) as missing:
        load_settings(tmp_path / "absent.yaml")
    assert missing.value.issues[0].file == str(tmp_path / "absent.yaml")


def test_demo_settings_serve_smollm2_from_a_child_engine() -> None:
    settings = demo_settings(port=8181)
    assert settings.port == 8181
    assert settings.policy_dir == Path("var/policies")
    (route,) = settings.models
    assert route.name == "smollm2"
    (backend,) = route.backends
    assert isinstance(backend, SelfhostBackend)
    assert (backend.model_path, backend.is_child_process, backend.device) == (
        "default",
        True,
        "cpu",
    )


def test_server_secret_is_generated_once_by_an_explicit_call(tmp_path: Path) -> None:
    settings = load_settings(var_dir=tmp_path / "var")
    assert not (tmp_path / "var").exists()  # building settings writes nothing
    secret = settings.resolve_server_secret(lambda n: bytes(range(n)))
    assert secret == bytes(range(32)).hex().encode()
    path = tmp_path / "var" / "secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert (
        settings.resolve_server_secret(lambda n: b"\xff" * n) == secret
    )  # read back, not regenerated
    assert load_settings(server_secret="given").resolve_server_secret() == b"given"


def test_the_tool_run_store_has_its_own_file_beside_a_sqlite_ledger() -> None:
    def store(**values: object) -> str:
        return load_settings(**values).tool_store_url()

    assert store() == "sqlite:///var/lantern-tool-runs.db"
    assert store(database_url="sqlite:////srv/l/ledger") == "sqlite:////srv/l/ledger-tool-runs"
    postgres = "postgresql+psycopg://u:pw@db/lantern"
    assert store(database_url=postgres) == postgres  # a server: its own connections suffice
    chosen = "sqlite:////srv/runs.db"
    assert store(sandbox={"database_url": chosen}) == chosen


def test_reference_config_loads() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "lantern.yaml"
    settings = load_settings(example)
    assert [(r.name, [b.kind for b in r.backends]) for r in settings.models] == [
        ("smollm2", ["selfhost"]),
        ("gpt-4o-mini", ["openai_compatible", "litellm"]),
        ("claude-sonnet", ["anthropic", "bedrock"]),
    ]
    assert settings.prices["gpt-4o-mini"].cache_read == 0.075


def test_the_replay_byte_bound_holds_a_whole_reply(tmp_path: Path) -> None:
    """A bound smaller than one stored reply would push out the reply being written."""
    path = tmp_path / "lantern.yaml"
    path.write_text("replay:\n  max_reply_bytes: 2000\n  max_bytes: 1000\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert "replay.max_bytes must be at least replay.max_reply_bytes" in str(caught.value)
    path.write_text("replay:\n  max_reply_bytes: 1000\n  max_bytes: 1000\n")
    assert load_settings(path).replay.max_bytes == 1000


def test_no_model_backend_takes_the_tool_runs_backend_name(tmp_path: Path) -> None:
    """The ledger tells a tool run's row by its backend (`sandbox:<runner>`), so budgets leave
    it out without an index of their own: no model backend may be named so."""
    assert TOOL_RUN_BACKEND.startswith(RESERVED_BACKEND_PREFIX)
    text = (
        "models:\n"
        "  - name: a\n"
        "    backends:\n"
        "      - {kind: openai_compatible, name: 'sandbox:local', model: m, base_url: http://x}\n"
    )
    path = write(tmp_path, text)
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert "names starting 'sandbox:' are the tool runs'" in str(caught.value)
    path = write(tmp_path, text.replace("'sandbox:local'", "'my-sandbox:local'"))
    assert load_settings(path).models[0].backends[0].name == "my-sandbox:local"
