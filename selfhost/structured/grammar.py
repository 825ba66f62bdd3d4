"""Grammars for guided decoding (llguidance): JSON-schema and tool-call grammars, compiled once per
grammar text into a bounded cache, and one `Guide` (the grammar state) per request.

No torch here; masks are filled and applied in masks.py and the sampler.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import llguidance

from selfhost.structured.budget import JsonLexState

# Compact JSON with the separators of Python's json.dumps: the arguments a forced call generates
# read exactly as the history re-renders them, so the next turn's prompt keeps the same tokens.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
DEFAULT_CACHE_SIZE = 128


class GrammarRejected(ValueError):
    """The request asks for a constraint the grammar library cannot express; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class Guide:
    """One request's grammar state: which tokens may come next, advanced per accepted token.
    `reserve_tokens`: the last tokens of its budget, kept for closing the structure (budget.py)."""

    def __init__(
        self,
        matcher: llguidance.LLMatcher,
        reserve_tokens: int = 0,
        token_bytes: Callable[[int], bytes] | None = None,
    ) -> None:
        self.matcher = matcher
        self.reserve_tokens = reserve_tokens
        self.lex = JsonLexState()
        self._token_bytes = token_bytes

    def accept(self, token_id: int) -> bool:
        """Advance past a sampled token; False if the grammar did not allow it."""
        if self._token_bytes is not None:
            self.lex.feed(self._token_bytes(token_id))
        return bool(self.matcher.consume_token(token_id))


def styled_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with the compact JSON style (a schema's own x-guidance keys win)."""
    return {**schema, "x-guidance": {**JSON_STYLE, **schema.get("x-guidance", {})}}


def json_grammar(schema: dict[str, Any]) -> str:
    return str(llguidance.LLMatcher.grammar_from_json_schema(styled_schema(schema)))


def tagged_json_grammar(open_tag: str, schema: dict[str, Any], close_tag: str) -> str:
    """`open_tag` JSON-per-schema `close_tag`, as a Lark grammar with an embedded %json rule."""
    body = json.dumps(styled_schema(schema))
    lark = f"start: {json.dumps(open_tag)} value {json.dumps(close_tag)}\nvalue: %json {body}\n"
    return str(llguidance.LLMatcher.grammar_from_lark(lark))


class GrammarCompiler:
    """Validates and compiles grammars for one tokenizer; a request gets a copy of the cached
    compiled matcher. The tokenizer's token table is built on first use (about a second)."""

    def __init__(
        self,
        tokenizer_json: str,
        eos_token_ids: tuple[int, ...],
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        self._tokenizer_json = tokenizer_json
        self._eos_token_ids = list(eos_token_ids)
        self._cache_size = cache_size
        self._cache: OrderedDict[str, llguidance.LLMatcher] = OrderedDict()
        self._lock = threading.Lock()
        self._tokenizer: llguidance.LLTokenizer | None = None

    @property
    def tokenizer(self) -> llguidance.LLTokenizer:
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = llguidance.LLTokenizer(
                    self._tokenizer_json, eos_token=self._eos_token_ids
                )
            return self._tokenizer

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.vocab_size)

    def check(self, grammar: str, field: str) -> None:
        """Raise GrammarRejected (naming `field`) unless the grammar compiles, without caching it."""
        message = llguidance.LLMatcher.validate_grammar(grammar, self.tokenizer)
        if message:
            raise GrammarRejected(field, message)

    def num_tokens(self, text: str) -> int:
        return len(self.tokenizer.tokenize_str(text)) if text else 0

    def guide(self, grammar: str, field: str, reserve_tokens: int = 0) -> Guide:
        """A fresh grammar state; blocking (compiles on a cache miss): call it off the event loop."""
        with self._lock:
            compiled = self._cache.get(grammar)
            if compiled is not None:
                self._cache.move_to_end(grammar)
        if compiled is None:
            compiled = self._compile(grammar, field)
        tokenizer = self.tokenizer
        return Guide(
            compiled.deep_copy(),
            reserve_tokens,
            lambda token_id: tokenizer.decode_bytes([token_id]),
        )

    def _compile(self, grammar: str, field: str) -> llguidance.LLMatcher:
        self.check(grammar, field)
        matcher = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise GrammarRejected(field, matcher.get_error())
        with self._lock:
            self._cache[grammar] = matcher
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return matcher

    @property
    def num_cached(self) -> int:
        return len(self._cache)
