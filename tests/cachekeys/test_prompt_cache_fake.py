"""The prompt-cache fake behaves like the providers: breakpoints, look-back, TTL, minimums, OpenAI steps."""

from __future__ import annotations

import httpx
import pytest

from adapters.tokens import TokenCounter
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from adapters.wire.codec import codec_for
from tests.fakes.prompt_cache import (
    Accounting,
    CacheMarkerError,
    PromptCacheFake,
    anthropic_blocks,
    openai_read_price,
)
from tests.fakes.upstream import FakeUpstream

COUNTER = TokenCounter()
MARK = {"type": "ephemeral"}


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def body(
    num_turns: int,
    *,
    model: str = "claude-sonnet-4-5",
    mark_last: bool = True,
    system_words: int = 1500,
) -> dict:
    messages: list[dict] = [
        {"role": "user", "content": [{"type": "text", "text": "task" + " a" * 50}]}
    ]
    for t in range(1, num_turns):
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"step {t}"}]})
        messages.append(
            {"role": "user", "content": [{"type": "text", "text": f"result {t}" + " a" * 100}]}
        )
    if mark_last:
        messages[-1]["content"][-1]["cache_control"] = MARK
    return {
        "model": model,
        "max_tokens": 10,
        "system": "rules" + " a" * system_words,
        "messages": messages,
    }


def send(fake: PromptCacheFake, wire: str, b: dict) -> Accounting:
    codec = codec_for(wire)
    fake.account(wire, b, COUNTER.count_request(codec.decode_request(b)))
    return fake.calls[-1]


def test_block_tokens_add_up_to_the_upstream_count() -> None:
    b = body(3)
    b["tools"] = [
        {"name": n, "description": "d " * 20, "input_schema": {"type": "object"}}
        for n in ("a", "b", "c")
    ]
    blocks = anthropic_blocks(b, lambda text: COUNTER.count_text(b["model"], text))
    assert blocks[-1].end + 3 == COUNTER.count_request(
        anthropic_wire.decode_request(b)
    )  # + reply priming


def test_write_then_read_then_expire() -> None:
    clock = Clock()
    fake = PromptCacheFake(clock)
    first = send(fake, "anthropic", body(1))
    assert (first.read, first.uncached) == (0, 3) and first.write == first.prompt_tokens - 3
    clock.now_s = 200.0
    second = send(fake, "anthropic", body(2))
    assert second.read == first.write  # the whole previous prefix
    assert second.write == second.prompt_tokens - 3 - second.read
    clock.now_s = 450.0  # 250 s after the read at 200 s: the read refreshed the lifetime
    assert send(fake, "anthropic", body(2)).read == second.read + second.write
    clock.now_s = 751.0  # 301 s idle: expired
    expired = send(fake, "anthropic", body(2))
    assert (expired.read, expired.write) == (0, expired.prompt_tokens - 3)


def test_one_hour_ttl_and_costs() -> None:
    clock = Clock()
    fake = PromptCacheFake(clock)
    b = body(1)
    b["messages"][-1]["content"][-1]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    first = send(fake, "anthropic", b)
    clock.now_s = 3000.0
    again = send(fake, "anthropic", b)
    assert again.read == first.write and again.write == 0
    assert first.cost() == pytest.approx(3 + 2.0 * first.write)
    assert again.cost() == pytest.approx(3 + 0.1 * again.read)


def test_no_marker_no_cache_and_below_minimum_no_write() -> None:
    fake = PromptCacheFake(Clock())
    assert send(fake, "anthropic", body(1, mark_last=False)).write == 0
    short = send(fake, "anthropic", body(1, model="claude-3-5-haiku", system_words=1500))
    assert short.prompt_tokens < 2048 and short.write == 0
    assert send(fake, "anthropic", body(1, model="claude-3-5-haiku", system_words=1500)).read == 0


def test_look_back_is_20_blocks() -> None:
    fake = PromptCacheFake(Clock())
    send(fake, "anthropic", body(1))  # entry after 1 message block
    far = body(12)  # 22 more blocks: the marker's look-back cannot reach the entry
    assert send(fake, "anthropic", far).read == 0
    fake = PromptCacheFake(Clock())
    send(fake, "anthropic", body(1))
    near = body(10)  # 18 more blocks
    assert send(fake, "anthropic", near).read > 0


def test_marker_rules() -> None:
    fake = PromptCacheFake(Clock())
    b = body(3)
    for message in b["messages"]:
        message["content"][-1]["cache_control"] = MARK
    with pytest.raises(CacheMarkerError):
        send(fake, "anthropic", b)
    b = body(2)
    b["messages"][0]["content"][-1]["cache_control"] = MARK
    b["messages"][-1]["content"][-1]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    with pytest.raises(CacheMarkerError):
        send(fake, "anthropic", b)


def test_tool_schema_key_order_matters_but_message_key_order_does_not() -> None:
    fake = PromptCacheFake(Clock())
    b = body(1)
    b["tools"] = [
        {"name": "a", "description": "d", "input_schema": {"type": "object", "properties": {}}}
    ]
    first = send(fake, "anthropic", b)
    reordered_message = {
        **b,
        "messages": [{"content": b["messages"][0]["content"], "role": "user"}],
    }
    assert send(fake, "anthropic", reordered_message).read == first.write
    reordered_schema = {
        **b,
        "tools": [
            {"name": "a", "description": "d", "input_schema": {"properties": {}, "type": "object"}}
        ],
    }
    assert send(fake, "anthropic", reordered_schema).read == 0


def openai_body(n_words: int, key: str | None = None) -> dict:
    b = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "rules" + " a" * n_words},
            {"role": "user", "content": "go"},
        ],
    }
    if key:
        b["prompt_cache_key"] = key
    return b


def test_openai_automatic_prefix_in_128_token_steps_shared_per_api_key() -> None:
    fake = PromptCacheFake(Clock())
    first = send(fake, "openai", openai_body(1500, "k1"))
    cached = 1024 + (first.prompt_tokens - 3 - 1024) // 128 * 128
    assert (first.read, first.write, first.stored) == (0, 0, cached)  # OpenAI bills no writes
    assert first.cost() == first.prompt_tokens
    again = send(fake, "openai", openai_body(1500, "k1"))
    assert again.read == cached and (again.read - 1024) % 128 == 0
    assert again.cost() == pytest.approx(again.prompt_tokens - 0.5 * cached)  # gpt-4o: half off
    # prompt_cache_key is a routing hint, not a boundary: same API key, same prefix, shared
    assert send(fake, "openai", openai_body(1500, "k2")).read == cached
    b = openai_body(1500, "k1")
    other = fake.account("openai", b, COUNTER.count_request(openai_wire.decode_request(b)), "sk-2")
    assert other == (first.prompt_tokens, 0, 0)  # another key: a miss
    assert send(fake, "openai", openai_body(900)).stored == 0  # under 1024 tokens: never cached


def test_openai_cached_rate_follows_the_model_family() -> None:
    assert [openai_read_price(m) for m in ("gpt-4o", "gpt-4.1-mini", "gpt-5", "o3")] == [
        0.5,
        0.25,
        0.1,
        0.25,
    ]


def test_each_read_names_who_wrote_the_entries_it_read() -> None:
    fake = PromptCacheFake(Clock())
    for wire, make in (("anthropic", lambda: body(0)), ("openai", lambda: openai_body(1500))):
        fake.principal = "alpha"
        first = send(fake, wire, make())
        fake.principal = "beta"
        second = send(fake, wire, make())
        assert first.read_from == frozenset() and not first.is_cross_read()
        assert second.read > 0 and second.read_from == {"alpha"} and second.is_cross_read()
        fake.principal = "alpha"
        own = send(fake, wire, make())  # beta's call refreshed alpha's entry: still alpha's
        assert own.read_from == {"alpha"} and not own.is_cross_read()


def test_through_the_http_fake_upstream_usage_is_reported_like_anthropic() -> None:
    fake = PromptCacheFake(Clock())
    with (
        FakeUpstream(cache=fake) as upstream,
        httpx.Client(base_url=upstream.base_url, timeout=10.0) as client,
    ):
        one = client.post("/v1/messages", json=body(1)).json()["usage"]
        two = client.post("/v1/messages", json=body(2)).json()["usage"]
    assert (
        one["cache_read_input_tokens"] == 0
        and one["cache_creation_input_tokens"] == fake.calls[0].write
    )
    assert two["cache_read_input_tokens"] == fake.calls[0].write
    assert two["input_tokens"] == 3 and two["cache_creation_input_tokens"] == fake.calls[1].write


def test_request_level_marker_marks_the_last_block() -> None:
    fake = PromptCacheFake(Clock())
    b = {**body(2, mark_last=False), "cache_control": {"type": "ephemeral"}}
    first = send(fake, "anthropic", b)
    assert first.write == first.prompt_tokens - 3
    assert send(fake, "anthropic", b).read == first.write


def test_anthropic_entries_are_shared_per_api_key_and_only_per_key() -> None:
    fake = PromptCacheFake(Clock())
    b = body(2)
    prompt = COUNTER.count_request(anthropic_wire.decode_request(b))
    _, _, written = fake.account("anthropic", b, prompt, "sk-one")
    assert written == prompt - 3
    assert fake.account("anthropic", b, prompt, "sk-one") == (3, written, 0)  # same key: read
    assert fake.account("anthropic", b, prompt, "sk-two") == (3, 0, written)  # other key: miss
    assert [c.api_key for c in fake.calls] == ["sk-one", "sk-one", "sk-two"]


def test_one_hour_writes_are_split_out_and_priced_at_two() -> None:
    fake = PromptCacheFake(Clock())
    b = body(2)
    b["system"] = [{"type": "text", "text": b["system"], "cache_control": {**MARK, "ttl": "1h"}}]
    call = send(fake, "anthropic", b)
    system_end = anthropic_blocks(b, lambda t: COUNTER.count_text(b["model"], t))[0].end
    assert call.write == call.prompt_tokens - 3 and call.write_1h == system_end
    five = call.write - system_end
    assert call.cost() == pytest.approx(3 + 2.0 * system_end + 1.25 * five)
