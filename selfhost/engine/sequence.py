"""One request's state inside the engine: tokens, sampling parameters, blocks, progress.

Torch-free; the block manager and scheduler mutate it, the engine reads it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from selfhost.engine.block_hash import ROOT_PARENT, hash_block


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling; temperature 0 means greedy, top_k 0 means off."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 16
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None
    # OpenAI's: subtracted once per token already generated (frequency) or once if it was at
    # all (presence); added to the named tokens' logits
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()

    @property
    def is_greedy(self) -> bool:
        return self.temperature <= 1e-5

    @property
    def adjusts_logits(self) -> bool:
        return bool(self.presence_penalty or self.frequency_penalty or self.logit_bias)


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """Prompt plus generated tokens; `num_computed_tokens` of them have KV in `block_table`."""

    request_id: str
    token_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    cache_salt: str = ""
    public_tokens: int = 0  # leading tokens whose full blocks hash unsalted (a public head)
    status: SequenceStatus = SequenceStatus.WAITING
    block_table: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_committed_blocks: int = 0
    num_cached_tokens: int = 0
    num_preemptions: int = 0
    was_admitted: bool = False
    finish_reason: str | None = None
    num_prompt_tokens: int = 0
    _block_hashes: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.num_prompt_tokens:
            self.num_prompt_tokens = len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def block_hashes(self, block_size: int) -> list[bytes]:
        """Chained hashes of all full blocks of the current tokens, extended incrementally."""
        hashes = self._block_hashes
        while (len(hashes) + 1) * block_size <= len(self.token_ids):
            start = len(hashes) * block_size
            parent = hashes[-1] if hashes else ROOT_PARENT
            salt = "" if start + block_size <= self.public_tokens else self.cache_salt
            hashes.append(hash_block(parent, self.token_ids[start : start + block_size], salt))
        return hashes
