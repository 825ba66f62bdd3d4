"""Limits enforced on the count the bundled engine bills: the gateway counts each prompt with the
engine's own tokenizer and chat template (fetched once from the engine, `GET /v1/tokenizer`),
so reservations equal what the engine reports, `max_prompt_tokens` holds on the engine's count
and no call settles beyond its reservation. Real engine process, real gateway, both doors."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from prometheus_client import CollectorRegistry

from bench._procs import free_port
from gateway.core.admission import Admission, AdmissionMetrics
from tests.adversarial.recording_store import RecordingStore
from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy

pytestmark = pytest.mark.slow

KEYS = {
    "acme": "lt-acme-count-key-00000000000000000001",
    "tight": "lt-tight-count-key-0000000000001",
}
MAX_TOKENS = 4
QUESTION = "Why does a shared prompt prefix make agent calls cheaper?"


@pytest.fixture(scope="module")
def engine_port() -> int:
    return free_port()


@pytest.fixture
def stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine_port: int
) -> Iterator[tuple[RunningGateway, RecordingStore, str]]:
    store = RecordingStore()

    def recording(cls: type[Admission], settings: object, registry: object = None) -> Admission:
        return cls(store, metrics=AdmissionMetrics(CollectorRegistry()))

    monkeypatch.setattr(Admission, "from_settings", classmethod(recording))
    policies = tmp_path / "policies"
    policies.mkdir()
    write_policy(policies, "acme", KEYS["acme"])
    write_policy(policies, "tight", KEYS["tight"], limits={"max_prompt_tokens": 40})
    backend = {
        "kind": "selfhost",
        "name": "smollm2-local",
        "model_path": "default",
        "port": engine_port,
        "timeout_s": 120,
    }
    config = write_config(
        tmp_path / "lantern.yaml",
        tmp_path,
        [{"name": "smollm2", "backends": [backend]}],
        prices={"smollm2": {"input": 0.02, "output": 0.04}},
    )
    gateway = start_gateway(config)
    try:
        yield gateway, store, f"http://127.0.0.1:{engine_port}"
    finally:
        gateway.stop()


def engine_count(engine: str, messages: list[dict]) -> int:
    """The engine's own count (its `/tokenize`, vLLM's shape), independent of the gateway."""
    reply = httpx.post(f"{engine}/tokenize", json={"messages": messages}, timeout=30)
    assert reply.status_code == 200, reply.text
    return int(reply.json()["count"])


def test_reservations_equal_the_engine_count_and_never_overrun(
    stack: tuple[RunningGateway, RecordingStore, str], caplog: pytest.LogCaptureFixture
) -> None:
    gateway, store, _ = stack
    caplog.set_level(logging.WARNING)
    oai = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEYS["acme"], max_retries=0)
    reported: list[int] = []
    history: list[dict] = [{"role": "system", "content": "You are terse."}]
    for turn in range(3):  # a demo-like session: a growing conversation, then no system prompt
        history.append({"role": "user", "content": f"{QUESTION} Part {turn}."})
        reply = oai.chat.completions.create(
            model="smollm2", max_tokens=MAX_TOKENS, temperature=0, messages=history
        )
        assert reply.usage is not None
        reported.append(reply.usage.prompt_tokens)
        history.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
    bare = oai.chat.completions.create(
        model="smollm2", max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": "Hi"}]
    )
    assert bare.usage is not None
    reported.append(bare.usage.prompt_tokens)
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=KEYS["acme"], max_retries=0)
    message = claude.messages.create(
        model="smollm2",
        max_tokens=MAX_TOKENS,
        system="Answer in French.",
        messages=[{"role": "user", "content": QUESTION}],
    )
    reported.append(message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0))
    admitted = [h.hold_tokens - MAX_TOKENS for h in store.settled()]
    assert admitted == reported  # the engine's own count, call by call, on both doors
    assert all(h.settled_tokens <= h.hold_tokens for h in store.settled())
    assert not [r for r in caplog.records if "beyond its reservation" in r.getMessage()]


def test_max_prompt_tokens_holds_on_the_engine_count(
    stack: tuple[RunningGateway, RecordingStore, str],
) -> None:
    gateway, _, engine = stack
    oai = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEYS["tight"], max_retries=0)
    fits = [{"role": "user", "content": "Hi"}]
    assert engine_count(engine, fits) <= 40
    ok = oai.chat.completions.create(model="smollm2", max_tokens=MAX_TOKENS, messages=fits)
    assert ok.usage is not None and ok.usage.prompt_tokens == engine_count(engine, fits)
    # a prompt tiktoken counts under the cap (~20 tokens) that the engine bills over it
    over = [{"role": "user", "content": "Summarise: " + "données " * 8}]
    assert engine_count(engine, over) > 40
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(model="smollm2", max_tokens=MAX_TOKENS, messages=over)
    error = caught.value.body
    assert isinstance(error, dict) and error.get("code") == "max_prompt_tokens"
