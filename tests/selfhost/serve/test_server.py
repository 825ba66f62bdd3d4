"""The OpenAI-compatible server, in-process on a random port, called with the official `openai` SDK."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from selfhost.engine.llm_engine import LLMEngine
from selfhost.model.tokenizer import TextTokenizer
from selfhost.serve.server import parse_args
from selfhost.structured.chat_plan import plan_chat
from tests.selfhost.serving import serving

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
ANSWER = "The capital of France is Paris."


@pytest.fixture(scope="module")
def base_url(make_engine: Callable[..., LLMEngine]) -> Iterator[str]:
    with serving(make_engine(num_blocks=128), "smollm2-test") as url:
        yield url


@pytest.fixture(scope="module")
def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", timeout=120, max_retries=0)


def metric(base_url: str, name: str) -> float:
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    line = next(row for row in text.splitlines() if row.startswith(f"selfhost_{name}{{"))
    return float(line.rsplit(" ", 1)[1])


def test_chat_non_stream_then_stream_with_cached_tokens(
    client: openai.OpenAI, chat_prompts: list[list[int]]
) -> None:
    first = client.chat.completions.create(
        model="smollm2-test", messages=QUESTION, temperature=0, max_tokens=16
    )
    assert first.choices[0].message.content == ANSWER
    assert first.choices[0].finish_reason == "stop"
    assert first.usage is not None
    assert (first.usage.prompt_tokens, first.usage.completion_tokens) == (len(chat_prompts[0]), 8)
    assert first.usage.prompt_tokens_details.cached_tokens == 0

    stream = client.chat.completions.create(
        model="smollm2-test",
        messages=QUESTION,
        temperature=0,
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ANSWER
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    usage = chunks[-1].usage
    assert usage is not None and chunks[-1].choices == []
    assert usage.prompt_tokens_details.cached_tokens == (len(chat_prompts[0]) - 1) // 16 * 16


def test_completions_with_logprobs_and_stop(client: openai.OpenAI) -> None:
    out = client.completions.create(
        model="smollm2-test",
        prompt="The capital of France is",
        max_tokens=6,
        temperature=0,
        logprobs=2,
    )
    choice = out.choices[0]
    assert choice.logprobs is not None and len(choice.logprobs.tokens) == 6
    assert "".join(choice.logprobs.tokens) == choice.text
    assert all(len(top) == 2 for top in choice.logprobs.top_logprobs)
    stopped = client.completions.create(
        model="smollm2-test",
        prompt="The capital of France is",
        max_tokens=6,
        temperature=0,
        stop=[choice.text[3:5]],
    )
    assert stopped.choices[0].text == choice.text[:3]
    assert stopped.choices[0].finish_reason == "stop"


def test_seeded_sampling_is_reproducible(client: openai.OpenAI) -> None:
    def ask() -> str | None:
        out = client.chat.completions.create(
            model="m", messages=QUESTION, temperature=1.0, top_p=0.9, seed=42, max_tokens=12
        )
        return out.choices[0].message.content

    assert ask() == ask()


def test_logit_bias_and_penalties_reach_the_sampler(client: openai.OpenAI) -> None:
    def ask(**sampling: Any) -> Any:
        sampling.setdefault("max_tokens", 6)
        sampling.setdefault("messages", QUESTION)
        return client.chat.completions.create(model="m", temperature=0, **sampling)

    plain = ask()
    assert plain.choices[0].message.content
    # token 33 ("1" in SmolLM2's vocabulary) forced at every step
    forced = ask(logit_bias={"33": 100})
    assert forced.choices[0].message.content == "1" * 6
    # the greedy answer repeats ", " after each number; penalised, the comma soon loses
    count = [{"role": "user", "content": "List the numbers from 1 to 20, separated by commas."}]
    repeat = ask(messages=count, max_tokens=24).choices[0].message.content
    penalised = ask(messages=count, max_tokens=24, presence_penalty=2.0, frequency_penalty=2.0)
    assert repeat.count(",") >= 6 > penalised.choices[0].message.content.count(",")
    for bad in (
        {"logit_bias": {"33": 101}},
        {"logit_bias": {"999999": 1}},
        {"presence_penalty": 3},
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            ask(**bad)  # out of OpenAI's ranges, or no such token
        param = refused.value.body["param"]  # type: ignore[index]
        assert param is None or param.split(".")[0] in bad  # e.g. logit_bias.33


def test_too_long_request_is_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=QUESTION, max_tokens=100_000)


def test_health_models_metrics_and_session_header(base_url: str) -> None:
    health = httpx.get(f"{base_url}/health", timeout=60)
    assert health.status_code == 200 and health.json() == {"status": "ok", "generated_tokens": 1}
    card = httpx.get(f"{base_url}/v1/models", timeout=10).json()["data"][0]
    assert card["id"] == "smollm2-test"
    # 128 blocks of 16, less the 1 % watermark (1 block): the KV bound is below max_model_len
    assert card["max_model_len"] == 127 * 16
    reply = httpx.post(
        f"{base_url}/v1/chat/completions",
        json={"messages": QUESTION, "max_tokens": 1, "cache_salt": "t1"},
        headers={"x-session-id": "sess-7"},
        timeout=60,
    )
    assert reply.status_code == 200 and reply.headers["x-session-id"] == "sess-7"
    assert metric(base_url, "prefix_cache_queries_total") > 0
    assert metric(base_url, "num_requests_running") == 0.0
    assert metric(base_url, "kv_cache_total_blocks") == 128.0


def test_client_disconnect_frees_blocks(base_url: str) -> None:
    generated_before = metric(base_url, "generation_tokens_total")
    body = {
        "messages": QUESTION,
        "max_tokens": 400,
        "ignore_eos": True,
        "stream": True,
        "cache_salt": "gone",
    }
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=body, timeout=60) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")
        assert metric(base_url, "num_requests_running") == 1.0
    deadline = time.monotonic() + 60
    while metric(base_url, "num_requests_running") != 0.0:
        assert time.monotonic() < deadline, "the aborted request still runs"
        time.sleep(0.1)
    assert metric(base_url, "kv_cache_usage_perc") == 0.0
    assert metric(base_url, "generation_tokens_total") - generated_before < 400


def test_cli_flags_parse() -> None:
    args = parse_args(
        [
            "--model",
            "default",
            "--port",
            "9001",
            "--host",
            "0.0.0.0",
            "--device",
            "cpu",
            "--dtype",
            "bfloat16",
            "--num-blocks",
            "64",
            "--max-num-batched-tokens",
            "256",
            "--chunk-size",
            "128",
        ]
    )
    assert (args.port, args.host, args.dtype, args.num_blocks) == (9001, "0.0.0.0", "bfloat16", 64)
    assert (args.max_num_batched_tokens, args.chunk_size, args.device) == (256, 128, "cpu")
    assert args.cpu_kernels is True
    assert parse_args(["--no-cpu-kernels"]).cpu_kernels is False


def test_tokenizer_card_and_tokenize_agree_with_the_billed_prompt(
    base_url: str, client: openai.OpenAI
) -> None:
    card = httpx.get(f"{base_url}/v1/tokenizer", timeout=30).json()
    assert card["model"] == "smollm2-test" and card["max_model_len"] > 0
    assert "im_start" in card["chat_template"] and card["eos_token"] == "<|im_end|>"
    counted = httpx.post(f"{base_url}/tokenize", json={"messages": QUESTION}, timeout=30).json()
    reply = client.chat.completions.create(model="m", messages=QUESTION, max_tokens=1)  # type: ignore[arg-type]
    assert reply.usage is not None and counted["count"] == reply.usage.prompt_tokens
    assert len(counted["tokens"]) == counted["count"]
    plain = httpx.post(f"{base_url}/tokenize", json={"prompt": "Paris"}, timeout=30).json()
    assert plain["count"] == len(plain["tokens"]) == 1


PUBLIC_RULES = "You answer questions for the public help desk of the city library. " * 8


CATALOGUE = {
    "type": "function",
    "function": {
        "name": "search_catalogue",
        "description": "Search the library catalogue by title, author or subject.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}


@pytest.mark.parametrize(("case", "head"), [("system", {"system": 1}), ("tools", {"tools": 1})])
def test_a_declared_public_head_is_shared_across_tenants_and_nothing_after_it(
    base_url: str, smollm_files: tuple[object, TextTokenizer], case: str, head: dict[str, int]
) -> None:
    user = "Which floor holds the maps?"  # the same private text for every tenant
    messages: list[dict[str, str]] = [{"role": "user", "content": user}]
    extra: dict[str, object] = {"tools": [CATALOGUE]} if case == "tools" else {}  # as sent
    if case == "system":
        messages.insert(0, {"role": "system", "content": PUBLIC_RULES})

    def cached(salt: str, public: bool) -> int:
        body = {"messages": messages, "max_tokens": 1, "cache_salt": f"{case}-{salt}", **extra}
        if public:
            body["lantern_public"] = head
        reply = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=120).json()
        return int(reply["usage"]["prompt_tokens_details"]["cached_tokens"])

    tokenizer = smollm_files[1]
    tools = [CATALOGUE] if case == "tools" else []
    plan = plan_chat(messages, tools, None, None, tokenizer.renders_tools)  # type: ignore[arg-type]
    text = tokenizer.render_chat(plan.messages, plan.tools)
    prompt = tokenizer.encode(text)
    public_ids = tokenizer.encode(text[: text.index(user)])  # up to the first private character
    pairs = zip(prompt, [*public_ids, -1], strict=False)
    public = next(i for i, (a, b) in enumerate(pairs) if a != b)
    assert public > 64
    assert cached("a", True) == 0
    assert cached("b", True) == public // 16 * 16  # the public blocks, none after them
    assert cached("a", True) == (len(prompt) - 1) // 16 * 16  # its own: everything
    assert cached("c", False) == 0  # no head declared: nothing is shared
