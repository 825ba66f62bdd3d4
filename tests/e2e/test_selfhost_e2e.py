"""The bundled engine behind the gateway, as `make run` serves it: a real SmolLM2 completion,
engine-reported cached tokens, and tenant salts that keep two tenants' caches apart."""

from __future__ import annotations

import socket
from pathlib import Path

import openai
import pytest

from tests.e2e.harness import start_gateway, write_config, write_policy

pytestmark = pytest.mark.slow

ACME, GLOBEX = (
    "lt-acme-engine-key-000000000000000000001",
    "lt-globex-engine-key-0000000000000000001",
)
PROMPT = "Explain in one sentence why a shared prompt prefix makes agents cheaper. " * 6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_smollm2_through_the_gateway_with_tenant_scoped_prefix_cache(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", ACME)
    write_policy(tmp_path / "policies", "globex", GLOBEX)
    models = [
        {
            "name": "smollm2",
            "backends": [
                {
                    "kind": "selfhost",
                    "name": "smollm2-local",
                    "model_path": "default",
                    "port": _free_port(),
                    "timeout_s": 120,
                }
            ],
        }
    ]
    config = write_config(
        tmp_path / "lantern.yaml",
        tmp_path,
        models,
        prices={"smollm2": {"input": 0.02, "output": 0.04}},
    )
    gw = start_gateway(config)
    try:

        def ask(key: str) -> openai.types.chat.ChatCompletion:
            client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0, timeout=120)
            return client.chat.completions.create(
                model="smollm2",
                max_tokens=8,
                temperature=0,
                messages=[{"role": "user", "content": PROMPT}],
            )

        first = ask(ACME)
        assert first.choices[0].message.content
        assert first.usage.completion_tokens == 8
        assert first.usage.prompt_tokens_details.cached_tokens == 0
        again = ask(ACME)
        assert again.choices[0].message.content == first.choices[0].message.content
        cached = again.usage.prompt_tokens_details.cached_tokens
        assert cached > 0 and cached % 16 == 0  # whole 16-token blocks from the engine
        other = ask(GLOBEX)  # same prompt, other tenant: its salt shares no block
        assert other.usage.prompt_tokens_details.cached_tokens == 0
    finally:
        gw.stop()
