"""The tool-call parser (whole text and any split into deltas give the same calls), the bounded
grammar cache, and token masks applied to logits rows."""

from __future__ import annotations

import json

import pytest
import torch

from selfhost.model.tokenizer import TextTokenizer
from selfhost.structured.grammar import GrammarCompiler, GrammarRejected, json_grammar
from selfhost.structured.masks import MaskFiller, StepMasks, apply_masks
from selfhost.structured.tool_format import call_text
from selfhost.structured.tool_parser import ToolCallParser

# an argument may hold the close tag, quotes and braces: only the tag outside strings closes
ARGS = '{"city": "Paris }", "note": "a \\"}}</tool_call>\\" b", "nested": {"a": [1, 2]}}'
TEXT = "Let me check.\n" + call_text("get_weather", ARGS) + "\n" + call_text("get_time", "{}")


def _parse(text: str, step: int) -> tuple[str, list[tuple[int, str | None, str]]]:
    parser = ToolCallParser()
    content, deltas = "", []
    for start in range(0, len(text), step):
        new, more = parser.feed(text[start : start + step])
        content, deltas = content + new, deltas + more
    new, more = parser.finish()
    return content + new, [(d.index, d.name, d.arguments) for d in deltas + more]


@pytest.mark.parametrize("step", [1, 2, 3, 5, 11, len(TEXT)])
def test_any_split_gives_the_same_calls(step: int) -> None:
    content, deltas = _parse(TEXT, step)
    assert content == "Let me check.\n\n"
    names = [(index, name) for index, name, _ in deltas if name is not None]
    assert names == [(0, "get_weather"), (1, "get_time")]
    assert "".join(a for index, _, a in deltas if index == 0) == ARGS
    assert json.loads(ARGS)["note"] == 'a "}}</tool_call>" b'
    assert "".join(a for index, _, a in deltas if index == 1) == "{}"


def test_calls_in_another_key_order_and_unclosed_ones() -> None:
    parser = ToolCallParser()
    parser.feed('<tool_call>\n{"arguments": {"x": 1}, "name": "f"}\n</tool_call>')
    parser.feed('<tool_call>\n{"name": "g", "arguments": {"y": 2}}')
    parser.finish()
    assert [(c.name, c.arguments) for c in parser.calls] == [("f", '{"x": 1}'), ("g", '{"y": 2}')]
    assert parser.content == ""


def test_text_that_only_looks_like_a_call_stays_text() -> None:
    parser = ToolCallParser()
    parser.feed("a <tool_call> b")
    parser.finish()
    assert parser.calls == [] and parser.content == "a <tool_call> b"


def test_compiled_grammars_are_cached_and_bounded(
    smollm_tokenizer: TextTokenizer,
) -> None:
    tokenizer = smollm_tokenizer
    compiler = GrammarCompiler(tokenizer.tokenizer.to_str(), tokenizer.eos_token_ids, cache_size=2)
    grammars = [
        json_grammar({"type": "object", "properties": {k: {"type": "integer"}}}) for k in "abc"
    ]
    for grammar in grammars + grammars[2:]:
        compiler.guide(grammar, "response_format")
    assert compiler.num_cached == 2
    with pytest.raises(GrammarRejected) as caught:
        compiler.guide(json_grammar({"type": "array", "uniqueItems": True}), "f.schema")
    assert caught.value.field == "f.schema"


def test_masks_leave_only_the_grammars_tokens(smollm_tokenizer: TextTokenizer) -> None:
    tokenizer = smollm_tokenizer
    compiler = GrammarCompiler(tokenizer.tokenizer.to_str(), tokenizer.eos_token_ids)
    guide = compiler.guide(json_grammar({"enum": ["yes", "no"]}), "response_format")
    vocab = compiler.vocab_size
    masks: StepMasks = MaskFiller(vocab).fill({"r1": guide})
    logits = torch.zeros((2, vocab))
    apply_masks(logits, ["free", "r1"], masks)
    assert bool(torch.isfinite(logits[0]).all())
    allowed = torch.isfinite(logits[1]).nonzero().flatten().tolist()
    texts = {tokenizer.decode([t]) for t in allowed}
    assert texts and all(
        json.dumps("yes").startswith(t) or json.dumps("no").startswith(t) for t in texts
    )
    assert guide.accept(tokenizer.encode('"yes"')[0])
