"""Text <-> token ids: a `tokenizers` byte-level BPE built from GGUF metadata, or tokenizer.json.

Also carries the chat template and the special ids the engine needs (EOS).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from selfhost.model.chat_template import ChatTemplate

GGUF_TOKEN_TYPE_NORMAL = 1
GGUF_TOKEN_TYPE_CONTROL = 3
GGUF_TOKEN_TYPE_USER_DEFINED = 4
# GPT-2's pre-tokenizer split with individual digits split first (llama.cpp pre type "smollm").
_DIGIT_FIRST_PRE_TYPES = {"smollm", "starcoder", "refact", "codeshell"}


@dataclass(frozen=True)
class TextTokenizer:
    tokenizer: Tokenizer
    chat_template: ChatTemplate | None
    eos_token_ids: tuple[int, ...]
    bos_token: str = ""
    eos_token: str = ""

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    @property
    def renders_tools(self) -> bool:
        return self.chat_template is not None and self.chat_template.renders_tools

    def render_chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> str:
        if self.chat_template is None:
            return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
        return self.chat_template.render(messages, self.bos_token, self.eos_token, tools=tools)


def build_bpe_from_gguf(
    tokens: list[str], merges: list[str], token_types: list[int], pre: str
) -> Tokenizer:
    """Byte-level BPE equal to the HF tokenizer the GGUF was converted from (gpt2-style models)."""
    vocab = {token: index for index, token in enumerate(tokens)}
    pairs = [tuple(merge.split(" ", 1)) for merge in merges]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))  # type: ignore[arg-type]
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _DIGIT_FIRST_PRE_TYPES:
        digits = pre_tokenizers.Digits(individual_digits=True)
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([digits, byte_level])
    elif pre == "gpt2" or pre == "default":
        tokenizer.pre_tokenizer = byte_level
    else:
        split = pre_tokenizers.Split(Regex(r"\p{N}{1,3}"), behavior="isolated")
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([split, byte_level])
    tokenizer.decoder = decoders.ByteLevel()
    special = [
        AddedToken(tokens[i], special=True, normalized=False)
        for i, kind in enumerate(token_types)
        if kind == GGUF_TOKEN_TYPE_CONTROL
    ]
    user = [
        AddedToken(tokens[i], special=False, normalized=False)
        for i, kind in enumerate(token_types)
        if kind == GGUF_TOKEN_TYPE_USER_DEFINED
    ]
    tokenizer.add_special_tokens(special)
    tokenizer.add_tokens(user)
    return tokenizer


def _meta(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def tokenizer_from_gguf(reader: Any) -> TextTokenizer:
    tokens = _meta(reader, "tokenizer.ggml.tokens")
    kind = _meta(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(f"unsupported GGUF tokenizer model {kind!r} (only byte-level BPE)")
    tokenizer = build_bpe_from_gguf(
        tokens,
        _meta(reader, "tokenizer.ggml.merges"),
        _meta(reader, "tokenizer.ggml.token_type"),
        _meta(reader, "tokenizer.ggml.pre", "default"),
    )
    eos_id = _meta(reader, "tokenizer.ggml.eos_token_id")
    bos_id = _meta(reader, "tokenizer.ggml.bos_token_id")
    template = _meta(reader, "tokenizer.chat_template")
    return TextTokenizer(
        tokenizer=tokenizer,
        chat_template=ChatTemplate(template) if template else None,
        eos_token_ids=() if eos_id is None else (int(eos_id),),
        bos_token="" if bos_id is None else tokens[int(bos_id)],
        eos_token="" if eos_id is None else tokens[int(eos_id)],
    )


def _token_text(value: Any) -> str:
    return value.get("content", "") if isinstance(value, dict) else (value or "")


def tokenizer_from_dir(path: Path, eos_token_ids: tuple[int, ...]) -> TextTokenizer:
    """HF layout: tokenizer.json (+ tokenizer_config.json for the template and special tokens)."""
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    config_path = path / "tokenizer_config.json"
    config = json.loads(config_path.read_text()) if config_path.exists() else {}
    eos = _token_text(config.get("eos_token"))
    eos_id = tokenizer.token_to_id(eos) if eos else None
    if eos_id is not None:
        eos_token_ids = (eos_id, *[i for i in eos_token_ids if i != eos_id])
    template = config.get("chat_template")
    return TextTokenizer(
        tokenizer=tokenizer,
        chat_template=ChatTemplate(template) if isinstance(template, str) else None,
        eos_token_ids=eos_token_ids,
        bos_token=_token_text(config.get("bos_token")),
        eos_token=eos,
    )
