"""Two tenants behind one provider key never share a provider prompt-cache entry (a timing side
channel on each other's prompts) unless they declared the prefix public: real gateway, the
provider fake keeping exact-prefix entries per API key with TTLs, as the real providers do."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from adapters.tokens import TokenCounter
from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.prompt_cache import Accounting, PromptCacheFake, anthropic_blocks
from tests.fakes.upstream import FakeUpstream

CLAUDE, GPT, NATIVE = "claude-sonnet-4-5", "gpt-4o", "gpt-native"
PROVIDER_KEY = "sk-one-key-for-every-tenant"
KEYS = {"alpha": "lt-iso-alpha-key-0001", "beta": "lt-iso-beta-key-00001"}
RULES = "You review pull requests for the payments team." + " rule" * 1500
TOOLS = [
    {
        "name": "run_tests",
        "description": "Run the test suite." + " t" * 50,
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


class Clock:
    now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def start(tmp_path: Path, cache: dict) -> tuple[RunningGateway, PromptCacheFake, FakeUpstream]:
    policies = tmp_path / "policies"
    policies.mkdir()
    for tenant, key in KEYS.items():
        write_policy(policies, tenant, key, models=[CLAUDE, GPT, NATIVE], cache=cache)
    fake = PromptCacheFake(Clock())
    upstream = FakeUpstream(cache=fake, api_key=PROVIDER_KEY).__enter__()
    anthropic = {
        "kind": "anthropic",
        "name": "claude-api",
        "base_url": upstream.base_url,
        "model": CLAUDE,
        "api_key_env": "ISOLATION_PROVIDER_KEY",
        "timeout_s": 10,
    }
    openai = {  # an OpenAI-compatible API (`engine` undeclared: other), not sent cache_salt
        "kind": "openai_compatible",
        "name": "openai-api",
        "base_url": upstream.openai_base_url,
        "model": GPT,
        "api_key_env": "ISOLATION_PROVIDER_KEY",
        "metrics_path": None,
        "timeout_s": 10,
    }
    native = {**openai, "name": "openai-responses", "model": NATIVE, "responses": "native"}
    models = [
        {"name": CLAUDE, "backends": [anthropic]},
        {"name": GPT, "backends": [openai]},
        {"name": NATIVE, "backends": [native]},
    ]
    prices = {NATIVE: {"input": 2.5, "output": 10.0}}
    config = write_config(tmp_path / "lantern.yaml", tmp_path, models, prices=prices)
    return start_gateway(config), fake, upstream


@pytest.fixture
def isolated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[RunningGateway, PromptCacheFake, FakeUpstream]]:
    monkeypatch.setenv("ISOLATION_PROVIDER_KEY", PROVIDER_KEY)
    gateway, fake, upstream = start(tmp_path, {})
    try:
        yield gateway, fake, upstream
    finally:
        gateway.stop()
        upstream.__exit__(None, None, None)


def anthropic_call(system: object, question: str) -> dict:
    return {
        "model": CLAUDE,
        "max_tokens": 16,
        "system": system,
        "tools": TOOLS,
        "messages": [{"role": "user", "content": question}],
    }


def calls(fake: PromptCacheFake, wire: str) -> list[Accounting]:
    """The test's calls (a fleet health probe of the OpenAI-compatible backend is tiny)."""
    return [c for c in fake.calls if c.wire == wire and c.prompt_tokens > 100]


def post(client: httpx.Client, tenant: str, path: str, body: dict) -> httpx.Response:
    headers = {"x-api-key": KEYS[tenant], "authorization": f"Bearer {KEYS[tenant]}"}
    response = client.post(path, json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response


def test_identical_prompts_of_two_tenants_never_share_an_entry(
    isolated: tuple[RunningGateway, PromptCacheFake, FakeUpstream],
) -> None:
    gateway, fake, _ = isolated
    body = anthropic_call(RULES, "Review PR 4412." + " diff" * 300)
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        for tenant in ("alpha", "beta", "alpha", "beta"):
            post(client, tenant, "/v1/messages", body)
    alpha_1, beta_1, alpha_2, beta_2 = calls(fake, "anthropic")
    assert {c.api_key for c in fake.calls} == {PROVIDER_KEY}  # one key for both tenants
    assert alpha_1.read == 0 and alpha_1.write == alpha_1.prompt_tokens - 3
    assert beta_1.read == 0  # byte-identical prompt, same key: no cross-tenant read
    assert beta_1.write == beta_1.prompt_tokens - 3
    assert alpha_2.read == alpha_1.write and beta_2.read == beta_1.write  # own cache still hits


def test_openai_automatic_caching_is_isolated_too(
    isolated: tuple[RunningGateway, PromptCacheFake, FakeUpstream],
) -> None:
    gateway, fake, upstream = isolated
    body = {
        "model": GPT,
        "max_tokens": 16,
        "messages": [
            {"role": "system", "content": RULES},
            {"role": "user", "content": "Review PR 4412."},
        ],
    }
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        for tenant in ("alpha", "beta", "alpha"):
            post(client, tenant, "/v1/chat/completions", body)
    alpha_1, beta_1, alpha_2 = calls(fake, "openai")
    assert alpha_1.read == 0 and beta_1.read == 0  # beta's identical prompt: a miss
    assert alpha_2.read == alpha_1.stored > 1024  # alpha's own entries: a hit
    sent = [r.json() for r in upstream.app.requests if r.path == "/v1/chat/completions"]
    assert not [b for b in sent if "cache_salt" in b]  # `engine: other` (the default) takes no salt


def test_native_responses_calls_are_isolated_too(
    isolated: tuple[RunningGateway, PromptCacheFake, FakeUpstream],
) -> None:
    """A backend that forwards `/v1/responses` natively: the body sent carries the tenant's
    scope line and its own `prompt_cache_key`, as a translated call does."""
    gateway, fake, upstream = isolated
    body = {"model": NATIVE, "instructions": RULES, "input": "Review PR 4412.", "store": False}
    body["prompt_cache_key"] = "pr-reviews"  # the same key from both tenants
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        for tenant in ("alpha", "beta", "alpha"):
            post(client, tenant, "/v1/responses", body)
    alpha_1, beta_1, alpha_2 = calls(fake, "openai")
    assert alpha_1.read == 0 and beta_1.read == 0  # beta's identical prompt: a miss
    assert alpha_2.read == alpha_1.stored > 1024  # alpha's own entries: a hit
    sent = [r.json() for r in upstream.app.requests if r.path == "/v1/responses"]
    keys = [b["prompt_cache_key"] for b in sent]
    assert keys[0] == keys[2] != keys[1] and "pr-reviews" not in keys  # scoped per tenant
    lines = [b["instructions"].removesuffix(RULES) for b in sent]
    assert lines[0] == lines[2] != lines[1]
    assert lines[1].startswith("[cache scope ") and lines[1].endswith("]\n")


def test_a_declared_public_prefix_is_still_shared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ISOLATION_PROVIDER_KEY", PROVIDER_KEY)
    public = hashlib.sha256(RULES.encode()).hexdigest()
    cache = {"public_prefixes": [{"tool": "run_tests"}, {"system_sha256": public}]}
    gateway, fake, upstream = start(tmp_path, cache)
    system = [
        {"type": "text", "text": RULES, "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Our repo uses Python 3.12." + " note" * 200},
    ]
    body = anthropic_call(system, "Review PR 4412." + " diff" * 300)
    try:
        with httpx.Client(base_url=gateway.url, timeout=30) as client:
            for tenant in ("alpha", "beta", "beta"):
                post(client, tenant, "/v1/messages", body)
    finally:
        gateway.stop()
        upstream.__exit__(None, None, None)
    counter = TokenCounter()
    messages = [r for r in upstream.app.requests if r.path == "/v1/messages"]
    sent = messages[1].json()  # beta's first call as the provider got it
    blocks = anthropic_blocks(sent, lambda text: counter.count_text(CLAUDE, text))
    public_end = blocks[1].end  # the public tool, then the public rules
    _, beta_1, beta_2 = calls(fake, "anthropic")
    assert beta_1.read == public_end  # the public head, written by alpha, read by beta
    assert beta_1.write == beta_1.prompt_tokens - 3 - public_end  # the private rest: beta's own
    assert beta_2.read == beta_2.prompt_tokens - 3  # beta's own entry on its second call
