"""Greedy tokens of the engine equal HF transformers' on the same dequantised SmolLM2 weights (fp32)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from selfhost.engine.llm_engine import LLMEngine
from selfhost.engine.sequence import SamplingParams
from tests.selfhost.conftest import NEW_TOKENS

GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


def run_staggered(
    engine: LLMEngine, prompts: list[list[int]], params: SamplingParams
) -> dict[str, list[int]]:
    """Add one request every other step, so prefills join batches that are already decoding."""
    outputs: dict[str, list[int]] = {f"r{i}": [] for i in range(len(prompts))}
    pending = list(enumerate(prompts))
    step = 0
    while pending or engine.has_unfinished():
        if pending and step % 2 == 0:
            index, prompt = pending.pop(0)
            engine.add_request(f"r{index}", prompt, params)
        for out in engine.step():
            outputs[out.request_id] += out.new_token_ids
        step += 1
    return outputs


def test_batch_of_one_matches_hf_tokens_and_logprobs(
    make_engine: Callable[..., LLMEngine], chat_prompts: list[list[int]], hf_greedy, hf_model
) -> None:
    prompt = chat_prompts[0]
    engine = make_engine()
    engine.add_request(
        "one",
        prompt,
        SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True, logprobs=3),
    )
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    assert [t for o in outputs for t in o.new_token_ids] == hf_greedy(prompt, NEW_TOKENS)
    with torch.inference_mode():
        expected = torch.log_softmax(hf_model(torch.tensor([prompt])).logits[0, -1].float(), -1)
    first = outputs[0].logprobs[0]
    assert first.top[0][0] == first.token_id == int(expected.argmax())
    for token_id, logprob in first.top:
        assert logprob == pytest.approx(float(expected[token_id]), abs=2e-4)


@pytest.mark.parametrize(("chunk_size", "budget"), [(512, 512), (16, 64), (7, 24)])
def test_continuous_batches_of_mixed_lengths_match_hf(
    make_engine: Callable[..., LLMEngine],
    chat_prompts: list[list[int]],
    hf_greedy,
    chunk_size: int,
    budget: int,
) -> None:
    engine = make_engine(chunk_size=chunk_size, max_num_batched_tokens=budget)
    outputs = run_staggered(engine, chat_prompts, GREEDY)
    for index, prompt in enumerate(chat_prompts):
        assert outputs[f"r{index}"] == hf_greedy(prompt, NEW_TOKENS), f"prompt {index}"


def test_prefix_cache_hit_matches_hf(
    make_engine: Callable[..., LLMEngine], chat_prompts: list[list[int]], hf_greedy
) -> None:
    engine = make_engine()
    first, second = chat_prompts[1], chat_prompts[2]
    assert engine.generate([first], GREEDY) == [hf_greedy(first, NEW_TOKENS)]
    engine.add_request("warm", second, GREEDY)
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    shared = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    assert outputs[-1].num_cached_tokens == shared // 16 * 16 > 0  # the shared system prompt
    assert [t for o in outputs for t in o.new_token_ids] == hf_greedy(second, NEW_TOKENS)


def test_preempted_and_resumed_requests_match_hf(
    make_engine: Callable[..., LLMEngine], chat_prompts: list[list[int]], hf_greedy
) -> None:
    prompts = chat_prompts[:3]
    longest = max(len(p) for p in prompts) + NEW_TOKENS
    engine = make_engine(num_blocks=-(-longest // 16) + 4, chunk_size=32, max_num_batched_tokens=64)
    outputs = engine.generate(prompts, GREEDY)
    assert engine.stats().num_preemptions == 1  # the newest request was recomputed once
    for prompt, output in zip(prompts, outputs, strict=True):
        assert output == hf_greedy(prompt, NEW_TOKENS)


def test_concurrent_requests_sharing_a_long_prefix_match_hf(
    make_engine: Callable[..., LLMEngine], smollm_files, hf_greedy
) -> None:
    """A shared system prompt of 100+ tokens: later requests wait for it, hit it, and decode
    together through the cascade path (shared blocks attended once for the whole batch)."""
    tokenizer = smollm_files[1]
    system = "You are a careful assistant for a museum. " * 12
    questions = ["Who painted the Mona Lisa?", "Name a famous sculpture.", "What is a fresco?"]
    prompts = [
        tokenizer.encode(
            tokenizer.render_chat(
                [{"role": "system", "content": system}, {"role": "user", "content": q}]
            )
        )
        for q in questions
    ]
    engine = make_engine()
    ids = [f"r{i}" for i in range(len(prompts))]
    for request_id, prompt in zip(ids, prompts, strict=True):
        engine.add_request(request_id, prompt, GREEDY)
    outputs: dict[str, list[int]] = {request_id: [] for request_id in ids}
    shared_blocks_seen = 0
    while engine.has_unfinished():
        running = list(engine.scheduler.running)
        if len(running) == 3:
            tables = [s.block_table for s in running]
            shared_blocks_seen = max(
                shared_blocks_seen,
                next(i for i, b in enumerate(zip(*tables, strict=False)) if len(set(b)) > 1),
            )
        for out in engine.step():
            outputs[out.request_id] += out.new_token_ids
    assert shared_blocks_seen >= 4  # enough for the cascade path
    common = next(i for i, tokens in enumerate(zip(*prompts, strict=False)) if len(set(tokens)) > 1)
    assert engine.stats().prefix_hit_tokens == 2 * (common // 16 * 16)
    for request_id, prompt in zip(ids, prompts, strict=True):
        assert outputs[request_id] == hf_greedy(prompt, NEW_TOKENS), request_id
