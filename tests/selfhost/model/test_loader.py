"""Loading: GGUF Q/K un-permutation, and an HF safetensors directory gives the same engine."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from selfhost.builder import build_engine, load_model_files
from selfhost.config import EngineConfig
from selfhost.engine.llm_engine import LLMEngine
from selfhost.engine.sequence import SamplingParams
from selfhost.model.loader import (
    LoadedWeights,
    ModelNotFound,
    resolve_model_path,
    unpermute_rope_rows,
)
from selfhost.model.tokenizer import TextTokenizer


def llama_cpp_permute(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf does to Q/K rows (written from its documented layout)."""
    rows = weight.shape[0]
    return (
        weight.reshape(num_heads, 2, rows // num_heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def test_unpermute_inverts_the_gguf_row_permutation() -> None:
    weight = np.arange(3 * 8 * 2, dtype=np.float32).reshape(24, 2)
    assert np.array_equal(unpermute_rope_rows(llama_cpp_permute(weight, 3), 3), weight)
    head = np.arange(8)
    # rows of one head: GGUF interleaves the two rotary halves (0,4,1,5,...); HF keeps them apart
    assert llama_cpp_permute(head.reshape(8, 1), 1).ravel().tolist() == [0, 4, 1, 5, 2, 6, 3, 7]


def test_default_model_resolves_and_missing_paths_fail() -> None:
    path = resolve_model_path("default")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    with pytest.raises(ModelNotFound):
        resolve_model_path("/nonexistent/model.gguf")


def test_gguf_config_matches_smollm2(smollm_files: tuple[LoadedWeights, TextTokenizer]) -> None:
    config = smollm_files[0].config
    assert (config.num_layers, config.hidden_size, config.num_heads, config.num_kv_heads) == (
        30,
        576,
        9,
        3,
    )
    assert (config.head_dim, config.intermediate_size, config.vocab_size) == (64, 1536, 49152)
    assert (config.rope_theta, config.tie_word_embeddings, config.eos_token_ids) == (
        100000.0,
        True,
        (2,),
    )
    assert len(smollm_files[0].state_dict) == 2 + 30 * 9


def test_safetensors_directory_gives_the_same_tokens(
    tmp_path: Path,
    smollm_files: tuple[LoadedWeights, TextTokenizer],
    make_engine: Callable[..., LLMEngine],
    chat_prompts: list[list[int]],
) -> None:
    weights, tokenizer = smollm_files
    save_file(
        {k: v.contiguous() for k, v in weights.state_dict.items()},
        str(tmp_path / "model.safetensors"),
    )
    (tmp_path / "config.json").write_text(json.dumps(weights.config.to_hf_dict()))
    tokenizer.tokenizer.save(str(tmp_path / "tokenizer.json"))
    assert tokenizer.chat_template is not None
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "chat_template": tokenizer.chat_template.source,
                "eos_token": "<|im_end|>",
                "bos_token": "<|im_start|>",
            }
        )
    )
    files = load_model_files(tmp_path)
    assert files[0].config == weights.config
    assert files[1].eos_token_ids == (2,)
    messages = [{"role": "user", "content": "Hi"}]
    assert files[1].encode(files[1].render_chat(messages)) == tokenizer.encode(
        tokenizer.render_chat(messages)
    )
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    from_dir = build_engine(EngineConfig(model=str(tmp_path), dtype="float32", num_blocks=64))
    assert from_dir.generate([chat_prompts[0]], params) == make_engine().generate(
        [chat_prompts[0]], params
    )
    assert torch.equal(from_dir.runner.model.embed, make_engine().runner.model.embed)
