"""Fixtures: fake upstreams, a tenant's policy, and a running gateway in front of them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.upstream import FakeUpstream

ACME_KEY = "lt-acme-secret-key-0001"
OTHER_KEY = "lt-other-secret-key-0002"


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


@pytest.fixture
def var_dir(tmp_path: Path) -> Path:
    (tmp_path / "policies").mkdir()
    return tmp_path


def models_for(fake: FakeUpstream) -> list[dict[str, object]]:
    return [
        {
            "name": "gpt-4o-mini",
            "backends": [
                {
                    "kind": "openai_compatible",
                    "name": "fake-openai",
                    "base_url": fake.openai_base_url,
                    "model": "gpt-4o-mini",
                    "timeout_s": 2,
                }
            ],
        },
        {
            "name": "claude-sonnet-4-5",
            "backends": [
                {
                    "kind": "anthropic",
                    "name": "fake-anthropic",
                    "base_url": fake.base_url,
                    "model": "claude-sonnet-4-5",
                    "api_key_env": None,
                    "timeout_s": 2,
                }
            ],
        },
        {
            "name": "claude-via-litellm",
            "backends": [
                {
                    "kind": "litellm",
                    "name": "litellm-anthropic",
                    "model": "anthropic/claude-sonnet-4-5",
                    "api_base": fake.base_url,
                    "api_key_env": "FAKE_ANTHROPIC_API_KEY",
                    "timeout_s": 5,
                }
            ],
        },
    ]


@pytest.fixture
def gateway(
    upstream: FakeUpstream, var_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RunningGateway]:
    monkeypatch.setenv("FAKE_ANTHROPIC_API_KEY", "sk-ant-fake")
    write_policy(
        var_dir / "policies",
        "acme",
        ACME_KEY,
        models=["gpt-4o-mini", "claude-sonnet-4-5", "claude-via-litellm"],
        limits={
            "max_prompt_tokens": 2000,
            "max_output_tokens": 256,
            "on_max_tokens_over": "reject",
        },
    )
    write_policy(var_dir / "policies", "other", OTHER_KEY, models=["claude-sonnet-4-5"])
    config = write_config(
        var_dir / "lantern.yaml",
        var_dir,
        models_for(upstream),
        prices={"claude-via-litellm": {"input": 3.0, "output": 15.0}},
    )
    running = start_gateway(config)
    try:
        yield running
    finally:
        running.stop()
