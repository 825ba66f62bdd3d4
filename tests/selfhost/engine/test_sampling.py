"""Sampler and detokenizer: seeds reproduce, filters behave, stop strings cut exactly."""

from __future__ import annotations

import pytest
import torch

from selfhost.engine.detokenizer import IncrementalDetokenizer
from selfhost.engine.sampler import Sampler, filtered_probs
from selfhost.engine.sequence import SamplingParams


class CharDecoder:
    """Token id n decodes to chr(n): enough to test text bookkeeping without a vocabulary."""

    def decode(self, token_ids: list[int]) -> str:
        return "".join(chr(t) for t in token_ids)


def test_filters_keep_exactly_the_expected_tokens() -> None:
    logits = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0])
    assert (filtered_probs(logits, 1.0, 2, 1.0) > 0).tolist() == [True, True, False, False, False]
    probs = torch.softmax(logits, -1)
    top_p = float(probs[0] + probs[1]) - 1e-6
    assert (filtered_probs(logits, 1.0, 0, top_p) > 0).tolist() == [True, True, False, False, False]
    assert (filtered_probs(logits, 1.0, 0, 0.01) > 0).tolist() == [True, False, False, False, False]
    sharpened = filtered_probs(logits, 0.5, 0, 1.0)
    assert float(sharpened.sum()) == pytest.approx(1.0)
    assert float(sharpened[0]) == pytest.approx(float(torch.softmax(logits / 0.5, -1)[0]))


def test_filters_break_ties_toward_the_lower_id_as_argmax_does() -> None:
    """bf16 logits tie often: top_k 1 must keep argmax's token, not every token tied with it."""
    logits = torch.tensor([1.0, 20.125, 3.0, 20.125, 20.125, 0.5])
    assert (filtered_probs(logits, 1.0, 1, 1.0) > 0).tolist() == [0, 1, 0, 0, 0, 0]
    assert (filtered_probs(logits, 1.0, 2, 1.0) > 0).tolist() == [0, 1, 0, 1, 0, 0]
    assert (filtered_probs(logits, 1.0, 0, 0.01) > 0).tolist() == [0, 1, 0, 0, 0, 0]
    hot = SamplingParams(temperature=1.0, top_k=1)
    sampler = Sampler(seed=0)
    draws = {sampler.sample(logits[None].clone(), ["h"], [hot])[0].token_id for _ in range(64)}
    assert draws == {int(logits.argmax())} == {1}


def test_seeded_requests_reproduce_regardless_of_batch_mates() -> None:
    torch.manual_seed(0)
    logits = torch.randn(3, 50)
    seeded = SamplingParams(temperature=1.0, seed=1234)
    other = SamplingParams(temperature=1.0)
    alone = [Sampler(seed=0).sample(logits[:1], ["a"], [seeded])[0].token_id for _ in range(1)]
    sampler = Sampler(seed=99)
    draws_a = [
        sampler.sample(logits, ["a", "b", "c"], [seeded, other, other])[0].token_id
        for _ in range(5)
    ]
    sampler2 = Sampler(seed=7)
    draws_b = [sampler2.sample(logits[:1], ["x"], [seeded])[0].token_id for _ in range(5)]
    assert draws_a == draws_b
    assert alone[0] == draws_a[0]


def test_greedy_and_logprobs() -> None:
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    token = Sampler(seed=0).sample(logits, ["g"], [SamplingParams(temperature=0.0, logprobs=2)])[0]
    expected = torch.log_softmax(logits[0], -1)
    assert token.token_id == 1
    assert token.logprobs is not None
    assert token.logprobs.logprob == float(expected[1])
    assert [t for t, _ in token.logprobs.top] == [1, 2]


def test_greedy_uses_the_given_argmax_only_where_it_reads_the_logits() -> None:
    """A kernel argmax serves contiguous fp32 CPU logits; anything else goes to torch."""
    calls: list[torch.Tensor] = []

    def argmax(logits: torch.Tensor) -> torch.Tensor:
        calls.append(logits)
        return logits.argmax(dim=-1)

    sampler = Sampler(seed=0, argmax=argmax)
    greedy = SamplingParams(temperature=0.0)
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 2.0, 1.0]])
    assert [t.token_id for t in sampler.sample(logits, ["a", "b"], [greedy, greedy])] == [1, 0]
    assert len(calls) == 1
    for other in (logits.T.contiguous().T, logits.double(), logits.bfloat16()):
        assert [t.token_id for t in sampler.sample(other, ["a", "b"], [greedy, greedy])] == [1, 0]
    assert len(calls) == 1


def test_stop_string_cuts_text_and_holds_back_partial_matches() -> None:
    detok = IncrementalDetokenizer(CharDecoder(), stop=("END",))
    emitted = [detok.add(ord(c)) for c in "abEN"]
    assert emitted == ["a", "b", "", ""]  # "E", "EN" could still become "END"
    assert detok.add(ord("x")) == "ENx"
    assert [detok.add(ord(c)) for c in "yEND"] == ["y", "", "", ""]
    assert detok.stopped
    assert detok.flush() == ""


def test_flush_releases_held_back_text() -> None:
    detok = IncrementalDetokenizer(CharDecoder(), stop=("###",))
    assert detok.add(ord("a")) == "a"
    assert detok.add(ord("#")) == ""
    assert detok.flush() == "#"


def test_incomplete_utf8_is_held_until_complete() -> None:
    class BytesDecoder:
        def decode(self, token_ids: list[int]) -> str:
            return bytes(token_ids).decode("utf-8", errors="replace")

    detok = IncrementalDetokenizer(BytesDecoder())
    encoded = "é!".encode()
    assert [detok.add(b) for b in encoded] == ["", "é", "!"]


def test_penalties_and_logit_bias_move_the_choice_as_openai_defines_them() -> None:
    logits = torch.tensor([[4.0, 3.5, 1.0, 0.0]])
    sampler = Sampler(seed=0)

    def greedy(p: SamplingParams, generated: list[int]) -> int:
        return sampler.sample(logits.clone(), ["r"], [p], generated=lambda _: generated)[0].token_id

    assert greedy(SamplingParams(temperature=0.0), [0, 0]) == 0
    # token 0 twice: 4.0 - 2 x 0.3 = 3.4 < 3.5
    assert greedy(SamplingParams(temperature=0.0, frequency_penalty=0.3), [0, 0]) == 1
    # presence counts once: 4.0 - 0.3 = 3.7 > 3.5
    assert greedy(SamplingParams(temperature=0.0, presence_penalty=0.3), [0, 0]) == 0
    assert greedy(SamplingParams(temperature=0.0, presence_penalty=0.6), [0, 0]) == 1
    forced = SamplingParams(temperature=0.0, logit_bias=((3, 100.0),))
    assert greedy(forced, []) == 3
    banned = SamplingParams(temperature=1.0, seed=7, logit_bias=((0, -100.0), (1, -100.0)))
    assert {greedy(banned, []) for _ in range(20)} <= {2, 3}
