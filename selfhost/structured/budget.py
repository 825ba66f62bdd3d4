"""The budget reserve of guided decoding: as a guided request's remaining tokens fall to what
closing its structure takes, its mask is narrowed to the tokens that close (a string's quote, a
`}` or `]`, end of sequence) wherever the grammar allows one, so the JSON ends before `max_tokens`
instead of being cut. Where the grammar allows no closing token (a required property still to
come), a separator (`,` `:`) is preferred to a value, then the shortest values; where it allows
none of these either, the mask is left as it is.

No torch here: the token set is built once per tokenizer, the masks apply it (masks.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

CLOSING_CHARS = frozenset('"]}')
SHORT_VALUES = frozenset(['"', '""', "true", "false", "null", "[]", "{}"])
SEPARATORS = frozenset([",", ":"])
# Closing tokens beyond the grammar's fixed tail: a quote and a bracket per nesting level of a
# typical agent schema, and a few tokens of slack for a value that must be finished first.
JSON_CLOSE_RESERVE = 8
QUOTE, BACKSLASH = ord('"'), ord("\\")


@dataclass(frozen=True)
class ClosingTokens:
    """`quote`: tokens that end a string (a quote first, then only closing characters);
    `bracket`: tokens that end an object or array (`}` or `]` first); `separator`: a `,` or
    `:` alone, for where a required property must come first (before `value`: after a digit
    the value set would grow the number instead); `value`: the shortest values, for where a
    value must come first (a digit, `""`, `true`, `false`, `null`, `[]`, `{}`, or a quote that
    the next step closes). Each holds EOS. Inside a string a `}` is text, so which set closes
    depends on where the JSON is (`JsonLexState`)."""

    quote: tuple[int, ...]
    bracket: tuple[int, ...]
    value: tuple[int, ...] = ()
    separator: tuple[int, ...] = ()


def closing_tokens(
    decode: Callable[[int], str], vocab_size: int, eos_token_ids: Iterable[int]
) -> ClosingTokens:
    eos = {i for i in eos_token_ids if 0 <= i < vocab_size}
    quote, bracket, value, separator = set(eos), set(eos), set(eos), set(eos)
    for token_id in range(vocab_size):
        text = decode(token_id).strip()
        if text in SHORT_VALUES or (text.isascii() and text.isdigit()):
            value.add(token_id)
        if text in SEPARATORS:
            separator.add(token_id)
        if not text or not set(text) <= CLOSING_CHARS:
            continue
        (quote if text[0] == '"' else bracket).add(token_id)
    return ClosingTokens(
        tuple(sorted(quote)),
        tuple(sorted(bracket)),
        tuple(sorted(value)),
        tuple(sorted(separator)),
    )


class JsonLexState:
    """Whether the text so far ends inside a JSON string, fed byte by byte (a quote or a
    backslash byte never occurs inside a UTF-8 multi-byte character)."""

    def __init__(self) -> None:
        self.in_string = False
        self._escaped = False

    def feed(self, data: bytes) -> None:
        for byte in data:
            if not self.in_string:
                self.in_string = byte == QUOTE
            elif self._escaped:
                self._escaped = False
            elif byte == BACKSLASH:
                self._escaped = True
            elif byte == QUOTE:
                self.in_string = False


def reserve_tokens(num_tail_tokens: int) -> int:
    """Tokens kept back to close the structure: its JSON, the grammar's fixed tail (a call's
    close tag) and the end-of-sequence token."""
    return JSON_CLOSE_RESERVE + num_tail_tokens + 1


def is_closing(remaining_tokens: int, reserve: int) -> bool:
    return remaining_tokens <= reserve
