"""The synchronous engine: add requests, step (schedule -> one forward -> sample), collect outputs.

Single-threaded by design; the async server drives it from its own thread (async_engine.py).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from collections.abc import Sequence as Sequence_
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from selfhost.engine.detokenizer import IncrementalDetokenizer
from selfhost.engine.model_runner import ModelRunner
from selfhost.engine.sampler import Sampler, TokenLogprobs
from selfhost.engine.scheduler import ScheduledSequence, Scheduler
from selfhost.engine.sequence import SamplingParams, Sequence
from selfhost.structured.budget import is_closing
from selfhost.structured.grammar import Guide
from selfhost.structured.masks import MaskFiller, StepMasks

if TYPE_CHECKING:  # the engine only decodes and reads EOS ids; jinja2 stays off its import path
    from selfhost.model.tokenizer import TextTokenizer

THROUGHPUT_WINDOW_S = 10.0
log = logging.getLogger(__name__)


class RequestRejected(ValueError):
    """The request can never fit (too long for the model or the KV cache) or is malformed."""


class GrammarDeadEnd(RuntimeError):
    """A guided request's grammar allows no next token (it cannot go on)."""


@dataclass(frozen=True)
class RequestOutput:
    request_id: str
    new_token_ids: tuple[int, ...]
    new_text: str
    finished: bool
    finish_reason: str | None
    num_prompt_tokens: int
    num_output_tokens: int
    num_cached_tokens: int
    logprobs: tuple[TokenLogprobs, ...] = ()
    error: str | None = None  # the request failed in this step (finished, nothing generated)


@dataclass(frozen=True)
class EngineStats:
    num_running: int
    num_waiting: int
    kv_usage: float
    prefix_query_tokens: int
    prefix_hit_tokens: int
    num_preemptions: int
    prompt_tokens_total: int
    generation_tokens_total: int
    tokens_per_s: float
    num_kv_blocks: int = 0  # blocks in the KV pool (capacity; kv_usage is the held fraction)

    @property
    def prefix_hit_rate(self) -> float:
        return (
            self.prefix_hit_tokens / self.prefix_query_tokens if self.prefix_query_tokens else 0.0
        )


class LLMEngine:
    def __init__(
        self,
        runner: ModelRunner,
        tokenizer: TextTokenizer,
        scheduler: Scheduler,
        sampler: Sampler,
        max_model_len: int,
        clock: Callable[[], float] = time.monotonic,
        masks: MaskFiller | None = None,
    ) -> None:
        self.runner = runner
        self.tokenizer = tokenizer
        self.scheduler = scheduler
        self.sampler = sampler
        self.max_model_len = max_model_len
        self.clock = clock
        self.masks = masks
        self._guides: dict[str, Guide] = {}
        self._detokenizers: dict[str, IncrementalDetokenizer] = {}
        self._sequences: dict[str, Sequence] = {}
        self._recent: deque[tuple[float, int]] = deque()
        self._prompt_tokens_total = 0
        self._generation_tokens_total = 0

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        cache_salt: str = "",
        guide: Guide | None = None,
        *,
        public_tokens: int = 0,
    ) -> None:
        """`guide`: the grammar this request's tokens must follow (guided decoding), if any.
        `public_tokens`: leading prompt tokens whose full blocks hash without `cache_salt`
        (a declared-public head, shared across tenants)."""
        self._validate(prompt_token_ids, params)
        if guide is not None and self.masks is None:
            raise RequestRejected("guided decoding is not enabled in this engine")
        seq = Sequence(
            request_id, list(prompt_token_ids), params, cache_salt, public_tokens=public_tokens
        )
        self._sequences[request_id] = seq
        if guide is not None:
            self._guides[request_id] = guide
        self._detokenizers[request_id] = IncrementalDetokenizer(self.tokenizer, params.stop)
        self.scheduler.add(seq)

    @property
    def max_request_tokens(self) -> int:
        """The most prompt + max_tokens one request may hold: the model's length, or less when
        the KV cache alone could not hold it (what `_validate` accepts)."""
        manager = self.scheduler.block_manager
        usable = manager.num_blocks - self.scheduler.config.watermark_blocks
        return min(self.max_model_len, usable * manager.block_size)

    def _validate(self, prompt_token_ids: list[int], params: SamplingParams) -> None:
        total = len(prompt_token_ids) + params.max_tokens
        if not prompt_token_ids:
            raise RequestRejected("the prompt is empty")
        if total > self.max_model_len:
            raise RequestRejected(
                f"prompt + max_tokens = {total} > max_model_len {self.max_model_len}"
            )
        if params.logit_bias:
            vocab = self.tokenizer.tokenizer.get_vocab_size(with_added_tokens=True)
            if any(not 0 <= token < vocab for token, _ in params.logit_bias):
                raise RequestRejected(f"logit_bias: token ids must be in [0, {vocab})")
        manager = self.scheduler.block_manager
        usable = manager.num_blocks - self.scheduler.config.watermark_blocks
        if manager.num_blocks_for(total) > usable:
            # Alone in the engine it could never be admitted: reject instead of waiting forever.
            raise RequestRejected(f"{total} tokens exceed the KV cache ({usable} usable blocks)")

    def abort(self, request_id: str) -> None:
        if self.scheduler.abort(request_id) is not None:
            self._forget(request_id)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> list[RequestOutput]:
        """One step. A failure fails only the requests it touched: a forward that raises, the
        requests the step held; a sampling that raises, those that sample; a grammar that allows
        nothing or a token that cannot be appended, that one request. The engine goes on."""
        output = self.scheduler.schedule()
        if not output.scheduled:
            return []
        pending = self._start_masks(output.scheduled)
        try:
            logits, sampled = self.runner.execute(output)
        except Exception as exc:  # noqa: BLE001 - the step's requests fail, the engine goes on
            if pending is not None:
                pending.exception()  # the mask thread reads their guides: let it finish first
            return self._fail([item.seq for item in output.scheduled], exc)
        self.scheduler.update_after_step(output)
        seqs = [item.seq for item in sampled]
        try:
            masks = None if pending is None else pending.result()
            tokens = self.sampler.sample(
                logits,
                [s.request_id for s in seqs],
                [s.params for s in seqs],
                masks,
                lambda row: seqs[row].token_ids[seqs[row].num_prompt_tokens :],
            )
        except Exception as exc:  # noqa: BLE001
            return self._fail(seqs, exc)
        self._count(output.num_batched_tokens, len(seqs))
        dead = masks.dead if masks is not None else frozenset()
        return [
            self._fail([seq], GrammarDeadEnd(seq.request_id))[0]
            if seq.request_id in dead
            else self._append_or_fail(seq, token.token_id, token.logprobs)
            for seq, token in zip(seqs, tokens, strict=True)
        ]

    def _append_or_fail(
        self, seq: Sequence, token_id: int, logprobs: TokenLogprobs | None
    ) -> RequestOutput:
        try:
            return self._append(seq, token_id, logprobs)
        except Exception as exc:  # noqa: BLE001
            return self._fail([seq], exc)[0]

    def _fail(self, seqs: list[Sequence], exc: Exception) -> list[RequestOutput]:
        """Abort `seqs` (their blocks are freed) and report each as failed."""
        log.error("engine step failed for %d request(s): %r", len(seqs), exc, exc_info=exc)
        outputs = []
        for seq in seqs:
            self.scheduler.abort(seq.request_id)
            self._forget(seq.request_id)
            outputs.append(
                RequestOutput(
                    request_id=seq.request_id,
                    new_token_ids=(),
                    new_text="",
                    finished=True,
                    finish_reason=None,
                    num_prompt_tokens=seq.num_prompt_tokens,
                    num_output_tokens=seq.num_output_tokens,
                    num_cached_tokens=seq.num_cached_tokens,
                    error=repr(exc),
                )
            )
        return outputs

    def _start_masks(self, scheduled: Sequence_[ScheduledSequence]) -> Future[StepMasks] | None:
        """Start filling the masks of the guided sequences that sample this step (they overlap
        the forward pass: a mask depends only on the tokens already accepted)."""
        guides = {
            item.seq.request_id: self._guides[item.seq.request_id]
            for item in scheduled
            if item.end == item.seq.num_tokens and item.seq.request_id in self._guides
        }
        if not guides or self.masks is None:
            return None
        closing = frozenset(
            request_id
            for request_id, guide in guides.items()
            if is_closing(self._remaining_tokens(self._sequences[request_id]), guide.reserve_tokens)
        )
        return self.masks.start(guides, closing)

    def _remaining_tokens(self, seq: Sequence) -> int:
        """Tokens the request may still generate, this step's included."""
        return min(
            seq.params.max_tokens - seq.num_output_tokens, self.max_model_len - seq.num_tokens
        )

    def _append(
        self, seq: Sequence, token_id: int, logprobs: TokenLogprobs | None
    ) -> RequestOutput:
        seq.token_ids.append(token_id)
        detokenizer = self._detokenizers[seq.request_id]
        text = detokenizer.add(token_id)
        guide = self._guides.get(seq.request_id)
        if guide is not None and not guide.accept(token_id):
            log.warning("request %s: token %d outside its grammar", seq.request_id, token_id)
        reason = "stop" if detokenizer.stopped else self._finish_reason(seq, token_id)
        if reason is not None:
            text += detokenizer.flush()
            self.scheduler.finish(seq, reason)
            self._forget(seq.request_id)
        return RequestOutput(
            request_id=seq.request_id,
            new_token_ids=(token_id,),
            new_text=text,
            finished=reason is not None,
            finish_reason=reason,
            num_prompt_tokens=seq.num_prompt_tokens,
            num_output_tokens=seq.num_output_tokens,
            num_cached_tokens=seq.num_cached_tokens,
            logprobs=() if logprobs is None else (logprobs,),
        )

    def _finish_reason(self, seq: Sequence, token_id: int) -> str | None:
        params = seq.params
        if not params.ignore_eos and token_id in self.tokenizer.eos_token_ids:
            return "stop"
        if token_id in params.stop_token_ids:
            return "stop"
        if seq.num_output_tokens >= params.max_tokens or seq.num_tokens >= self.max_model_len:
            return "length"
        return None

    def _forget(self, request_id: str) -> None:
        self._detokenizers.pop(request_id, None)
        self._sequences.pop(request_id, None)
        self._guides.pop(request_id, None)
        self.sampler.release(request_id)

    def _count(self, num_batched_tokens: int, num_generated: int) -> None:
        now = self.clock()
        self._prompt_tokens_total += num_batched_tokens - num_generated
        self._generation_tokens_total += num_generated
        self._recent.append((now, num_batched_tokens))
        while self._recent and self._recent[0][0] < now - THROUGHPUT_WINDOW_S:
            self._recent.popleft()

    def stats(self) -> EngineStats:
        scheduler = self.scheduler
        span = self.clock() - self._recent[0][0] if self._recent else 0.0
        tokens = sum(n for _, n in self._recent)
        return EngineStats(
            num_running=len(scheduler.running),
            num_waiting=len(scheduler.waiting),
            kv_usage=scheduler.block_manager.usage,
            prefix_query_tokens=scheduler.stats.prefix_query_tokens,
            prefix_hit_tokens=scheduler.stats.prefix_hit_tokens,
            num_preemptions=scheduler.stats.num_preemptions,
            prompt_tokens_total=self._prompt_tokens_total,
            generation_tokens_total=self._generation_tokens_total,
            tokens_per_s=tokens / span if span > 0 else 0.0,
            num_kv_blocks=scheduler.block_manager.num_blocks,
        )

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
        """Offline helper: run the prompts to completion together; returns output token ids."""
        ids = [f"offline-{i}" for i in range(len(prompts))]
        for request_id, prompt in zip(ids, prompts, strict=True):
            self.add_request(request_id, prompt, params)
        outputs: dict[str, list[int]] = {request_id: [] for request_id in ids}
        while self.has_unfinished():
            for out in self.step():
                outputs[out.request_id] += out.new_token_ids
        return [outputs[request_id] for request_id in ids]
