"""Decode throughput of the bundled engine at 16 concurrent sequences with and without a grammar
active, side by side in one run (`python -m bench.engine --grammar`).

In process (no HTTP): the same 16 prompts decode `--tokens` tokens each, free (ignore_eos) or
each under its own copy of a JSON-string grammar that cannot end before max_tokens; the two
alternate `--rounds` times and the best round of each is reported. Only decode-only steps count.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from selfhost.builder import build_engine, default_dtype
from selfhost.config import EngineConfig
from selfhost.engine.llm_engine import LLMEngine
from selfhost.engine.sequence import SamplingParams
from selfhost.structured.grammar import GrammarCompiler, json_grammar

NUM_SEQS = 16
PROMPT_TOKENS = 64


@dataclass(frozen=True)
class Round:
    guided: bool
    decode_tokens: int
    decode_s: float

    @property
    def tok_s(self) -> float:
        return self.decode_tokens / self.decode_s


def run_round(
    engine: LLMEngine,
    compiler: GrammarCompiler | None,
    prompts: list[list[int]],
    tokens: int,
    tag: str,
) -> Round:
    """One batch of `len(prompts)` requests to completion; counts steps where every row decodes."""
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=compiler is None)
    # A string of at least 8 characters per token: no sequence can finish before max_tokens.
    grammar = json_grammar({"type": "string", "pattern": f"^[a-z ]{{{8 * tokens},}}$"})
    for index, prompt in enumerate(prompts):
        guide = None if compiler is None else compiler.guide(grammar, "bench")
        engine.add_request(f"{tag}-{index}", prompt, params, guide=guide)
    decode_tokens, decode_s = 0, 0.0
    while engine.has_unfinished():
        decoding = _all_decoding(engine)
        started = time.perf_counter()
        outputs = engine.step()
        if decoding:
            decode_s += time.perf_counter() - started
            decode_tokens += len(outputs)
    return Round(compiler is not None, decode_tokens, decode_s)


def _all_decoding(engine: LLMEngine) -> bool:
    """The next step only decodes: nothing waits, every running sequence has its prompt's KV."""
    scheduler = engine.scheduler
    return not scheduler.waiting and all(
        seq.num_computed_tokens == seq.num_tokens - 1 for seq in scheduler.running
    )


def measure(tokens: int, rounds: int, threads: int, dtype: str) -> list[Round]:
    torch.set_num_threads(threads)
    engine = build_engine(EngineConfig(dtype=dtype, num_blocks=1024, max_num_seqs=NUM_SEQS))
    tokenizer = engine.tokenizer
    compiler = GrammarCompiler(tokenizer.tokenizer.to_str(), tokenizer.eos_token_ids)
    words = "agent tool call cache prefix token tenant policy quota replica request session"
    prompts = [tokenizer.encode(f"Note {i}: {words * 8}")[:PROMPT_TOKENS] for i in range(NUM_SEQS)]
    run_round(engine, compiler, prompts, 4, "warm-guided")  # compiles and caches the grammar
    run_round(engine, None, prompts, 4, "warm-free")
    results: list[Round] = []
    for index in range(rounds):
        results.append(run_round(engine, None, prompts, tokens, f"free-{index}"))
        results.append(run_round(engine, compiler, prompts, tokens, f"guided-{index}"))
    return results


def report(results: list[Round], tokens: int, threads: int, dtype: str) -> str:
    free = max((r for r in results if not r.guided), key=lambda r: r.tok_s)
    guided = max((r for r in results if r.guided), key=lambda r: r.tok_s)
    ratio = guided.tok_s / free.tok_s
    load = os.getloadavg()[0]
    return "\n".join(
        [
            f"decode at {NUM_SEQS} concurrent, {tokens} tokens each, {dtype}, {threads} threads,"
            f" best of {len(results) // 2} rounds (1-min load average now {load:.1f})",
            "| grammar | decode tok/s | decode s |",
            "| --- | --- | --- |",
            f"| none | {free.tok_s:.1f} | {free.decode_s:.2f} |",
            f"| JSON string (llguidance) | {guided.tok_s:.1f} | {guided.decode_s:.2f} |",
            f"guided / free: {ratio:.3f} ({(1 - ratio) * 100:+.1f} % slower; target within 15 %)",
        ]
    )


def main(tokens: int, rounds: int, threads: int, dtype: str | None) -> int:
    dtype = dtype or default_dtype("cpu")
    print(report(measure(tokens, rounds, threads, dtype), tokens, threads, dtype))
    return 0
