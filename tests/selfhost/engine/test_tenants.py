"""Prefix sharing is scoped by cache_salt: two tenants never share blocks; one tenant does."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from selfhost.engine.llm_engine import LLMEngine, RequestRejected
from selfhost.engine.sequence import SamplingParams

PARAMS = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)


def run_one(
    engine: LLMEngine, request_id: str, prompt: list[int], salt: str
) -> tuple[int, list[int]]:
    """Returns (cached prompt tokens, the request's block table at its first step)."""
    engine.add_request(request_id, prompt, PARAMS, cache_salt=salt)
    seq = engine.scheduler.waiting[-1]
    cached, table = -1, []
    while engine.has_unfinished():
        outputs = engine.step()
        if not table:
            table = list(seq.block_table)
        cached = next((o.num_cached_tokens for o in outputs if o.request_id == request_id), cached)
    return cached, table


def test_two_tenants_share_nothing_one_tenant_shares(
    make_engine: Callable[..., LLMEngine], chat_prompts: list[list[int]]
) -> None:
    engine = make_engine()
    prompt = chat_prompts[3]
    full_blocks = (len(prompt) - 1) // 16
    cached_a, blocks_a = run_one(engine, "a1", prompt, "tenant-a")
    cached_b, blocks_b = run_one(engine, "b1", prompt, "tenant-b")
    cached_a2, blocks_a2 = run_one(engine, "a2", prompt, "tenant-a")
    assert (cached_a, cached_b, cached_a2) == (0, 0, full_blocks * 16)
    assert set(blocks_b).isdisjoint(blocks_a[:full_blocks])  # a's cached blocks stay a's
    assert blocks_a2[:full_blocks] == blocks_a[:full_blocks]
    stats = engine.stats()
    assert (stats.prefix_query_tokens, stats.prefix_hit_tokens) == (
        3 * len(prompt),
        full_blocks * 16,
    )


def test_concurrent_tenants_with_the_same_prompt_hold_disjoint_blocks(
    make_engine: Callable[..., LLMEngine], chat_prompts: list[list[int]]
) -> None:
    engine = make_engine()
    prompt = chat_prompts[3]
    engine.add_request("a", prompt, PARAMS, cache_salt="tenant-a")
    engine.add_request("b", prompt, PARAMS, cache_salt="tenant-b")
    engine.step()  # both prefill in the same step: different salts never wait on each other
    a, b = engine.scheduler.running
    assert (a.num_computed_tokens, b.num_computed_tokens) == (len(prompt), len(prompt))
    assert set(a.block_table).isdisjoint(b.block_table)
    while engine.has_unfinished():
        engine.step()


def test_request_larger_than_the_usable_pool_is_rejected(
    make_engine: Callable[..., LLMEngine],
) -> None:
    engine = make_engine(num_blocks=200)  # watermark: 2 blocks, so 198 usable = 3168 tokens
    with pytest.raises(RequestRejected):
        engine.add_request("big", [5] * 3160, SamplingParams(max_tokens=9))
    engine.add_request("fits", [5] * 3160, SamplingParams(max_tokens=8, temperature=0.0))
    assert not engine.scheduler.waiting[0].block_table


def test_a_public_head_is_shared_across_tenants_and_nothing_after_it(
    make_engine: Callable[..., LLMEngine],
) -> None:
    engine = make_engine()
    head = [7] * 40  # 2 full public blocks, the third straddles the end of the head
    prompt_a = head + [11] * 40
    prompt_b = head + [11] * 40  # identical text: the private part still never matches
    engine.add_request("a", prompt_a, PARAMS, cache_salt="tenant-a", public_tokens=len(head))
    while engine.has_unfinished():
        engine.step()
    cached_b = _run_public(engine, "b", prompt_b, "tenant-b", len(head))
    cached_a2 = _run_public(engine, "a2", prompt_a, "tenant-a", len(head))
    cached_c = _run_public(engine, "c", prompt_b, "tenant-c", 0)  # no public head declared
    assert (cached_b, cached_a2, cached_c) == (32, 64, 0)


def _run_public(
    engine: LLMEngine, request_id: str, prompt: list[int], salt: str, public: int
) -> int:
    engine.add_request(request_id, prompt, PARAMS, cache_salt=salt, public_tokens=public)
    cached = -1
    while engine.has_unfinished():
        outputs = engine.step()
        cached = next((o.num_cached_tokens for o in outputs if o.request_id == request_id), cached)
    return cached
