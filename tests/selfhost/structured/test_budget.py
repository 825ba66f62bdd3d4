"""The budget reserve's narrowing on SmolLM2's real vocabulary: which tokens a guided row may take
once its remaining tokens fall within the reserve, by where the JSON is."""

from __future__ import annotations

import pytest

from selfhost.model.tokenizer import TextTokenizer
from selfhost.structured.budget import closing_tokens
from selfhost.structured.grammar import GrammarCompiler, Guide, json_grammar
from selfhost.structured.masks import MaskFiller

POINT = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
    "required": ["x", "y"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def tools(smollm_tokenizer: TextTokenizer) -> tuple[TextTokenizer, GrammarCompiler]:
    tokenizer = smollm_tokenizer
    return tokenizer, GrammarCompiler(tokenizer.tokenizer.to_str(), tokenizer.eos_token_ids)


def _closing_texts(tokenizer: TextTokenizer, compiler: GrammarCompiler, guide: Guide) -> set[str]:
    vocab = compiler.vocab_size
    decode = lambda token_id: tokenizer.decode([token_id])  # noqa: E731
    filler = MaskFiller(vocab, closing_tokens(decode, vocab, tokenizer.eos_token_ids))
    masks = filler.fill({"r": guide}, frozenset({"r"}))
    allowed = masks.penalty[0].isfinite().nonzero().flatten().tolist()
    return {decode(t) for t in allowed}


def _guide_after(compiler: GrammarCompiler, tokenizer: TextTokenizer, text: str) -> Guide:
    guide = compiler.guide(json_grammar(POINT), "response_format", reserve_tokens=9)
    for token_id in tokenizer.encode(text):
        assert guide.accept(token_id), text
    return guide


def test_a_number_before_a_required_property_ends_at_a_separator(
    tools: tuple[TextTokenizer, GrammarCompiler],
) -> None:
    """After `{"x": 1` with `y` still required no `}` may come: the reserve takes the `,`
    (the digits it took before grew the number until max_tokens)."""
    tokenizer, compiler = tools
    texts = _closing_texts(tokenizer, compiler, _guide_after(compiler, tokenizer, '{"x": 1'))
    assert texts and {t.strip() for t in texts} == {","}


def test_a_number_that_may_end_the_object_closes_it(
    tools: tuple[TextTokenizer, GrammarCompiler],
) -> None:
    tokenizer, compiler = tools
    texts = _closing_texts(
        tokenizer, compiler, _guide_after(compiler, tokenizer, '{"x": 1, "y": 2')
    )
    assert texts and all(t.strip().startswith("}") for t in texts)


def test_a_value_to_come_takes_a_shortest_value(
    tools: tuple[TextTokenizer, GrammarCompiler],
) -> None:
    tokenizer, compiler = tools
    texts = _closing_texts(tokenizer, compiler, _guide_after(compiler, tokenizer, '{"x": '))
    assert texts and all(t.strip().isdigit() for t in texts)
