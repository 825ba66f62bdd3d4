"""The memoised token counter against the plain one: same ids, same counts, bounded memory."""

from __future__ import annotations

import orjson

from adapters.tokens import (
    MEMO_MAX_CHARS,
    MEMO_MIN_CHARS,
    RECENT_MAX_CHARS,
    TokenCounter,
    TokenIdsMemo,
)
from adapters.wire import openai as openai_wire

HISTORY = " ".join(f"step {i} read the file and saw value {i * 7}." for i in range(300))


def _body(turn: int) -> dict[str, object]:
    return {
        "model": "gpt-4o-mini",
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": f"tool_{i}",
                    "description": "Reads a file from the workspace. " * 4,
                    "parameters": {"type": "object", "properties": {"p": {"type": "string"}}},
                },
            }
            for i in range(3)
        ],
        "messages": [
            {"role": "system", "content": "You are a careful coding agent. " * 10},
            {"role": "user", "content": HISTORY},
            {"role": "assistant", "content": f"Done with turn {turn}, " + "ok " * 30},
            {"role": "user", "content": f"turn {turn}"},
        ],
    }


def test_memoised_counts_equal_plain_counts_call_after_call() -> None:
    plain, memo = TokenCounter(), TokenCounter(TokenIdsMemo())
    for turn in range(6):
        request = openai_wire.decode_request(orjson.loads(orjson.dumps(_body(turn))))
        assert memo.count_request(request) == plain.count_request(request)
    assert memo.memo is not None and memo.memo.num_tokens > 0


def test_memo_returns_the_plain_ids_for_new_and_repeated_texts() -> None:
    plain, memo = TokenCounter(), TokenCounter(TokenIdsMemo())
    enc = plain.encoding("gpt-4o")
    for text in (HISTORY, HISTORY[:100], "".join(reversed(HISTORY)), HISTORY):
        assert list(memo.encode("gpt-4o", text)) == enc.encode_ordinary(text)
        copy = "".join(list(text))  # equal text, another object: found by digest
        assert list(memo.encode("gpt-4o", copy)) == enc.encode_ordinary(text)
    # one encoding's ids never answer for another's
    assert list(memo.encode("gpt-4", HISTORY)) == plain.encoding("gpt-4").encode_ordinary(HISTORY)


def test_short_texts_are_counted_without_the_memo() -> None:
    memo = TokenIdsMemo()
    counter = TokenCounter(memo)
    assert counter.count_text("gpt-4o", "hello world") == 2
    assert memo.num_tokens == 0
    long_text = "hello world " * (MEMO_MIN_CHARS // 4)
    assert counter.count_text("gpt-4o", long_text) == TokenCounter().count_text("gpt-4o", long_text)
    assert memo.num_tokens > 0


def test_a_short_text_just_encoded_is_counted_from_its_ids_and_equals_the_plain_count() -> None:
    memo = TokenIdsMemo()
    counter = TokenCounter(memo)
    enc = counter.encoding("gpt-4o")
    turn = "".join(["turn 27 ", "words:12"])  # a new object, as a decoded body's text is
    memo.ids(enc, turn, b"d" * 32)  # prefix hashing encodes the call's blocks first
    calls: list[str] = []
    plain = enc.encode_ordinary

    def counted(text: str) -> list[int]:
        calls.append(text)
        return plain(text)

    enc.encode_ordinary = counted  # type: ignore[method-assign]
    try:
        assert counter.count_text("gpt-4o", turn) == len(plain(turn)) == 6
        assert calls == []  # read from the memo's recent texts, not encoded again
        assert counter.count_text("gpt-4o", "".join(list(turn))) == 6  # equal text, other object
        assert len(calls) == 1  # encoded: short texts are still never looked up by digest
        assert counter.count_text("gpt-4", turn) == TokenCounter().count_text("gpt-4", turn)
    finally:
        del enc.encode_ordinary


def test_memo_stays_within_its_bytes() -> None:
    memo = TokenIdsMemo(max_bytes=1000)
    counter = TokenCounter(memo)
    for i in range(20):
        text = f"document {i}: " + "alpha beta gamma " * 10
        assert len(counter.encode("gpt-4o", text)) == TokenCounter().count_text("gpt-4o", text)
        assert 0 < memo.num_bytes <= 1000
    # the last three texts' ids: 35 tokens each, at 4 bytes a token and 160 an entry
    assert (memo.num_tokens, memo.num_bytes) == (3 * 35, 3 * (4 * 35 + 160))


def test_a_huge_text_is_counted_and_not_kept() -> None:
    """A client's 28 MiB text must not stay in memory after its call: counted, never kept."""
    memo = TokenIdsMemo()
    counter = TokenCounter(memo)
    huge = "alpha beta gamma " * (MEMO_MAX_CHARS // 17 + 1)
    assert counter.count_text("gpt-4o", huge) == TokenCounter().count_text("gpt-4o", huge)
    assert list(counter.encode("gpt-4o", huge)) == counter.encoding("gpt-4o").encode_ordinary(huge)
    assert (memo.num_tokens, memo.num_recent_chars) == (0, 0)


def test_the_recent_texts_are_bounded_by_their_size() -> None:
    memo = TokenIdsMemo()
    counter = TokenCounter(memo)
    block = "alpha beta gamma " * (RECENT_MAX_CHARS // 4 // 17)  # a quarter, under MEMO_MAX_CHARS
    texts = [f"{i} {block}" for i in range(6)]
    for text in texts:
        counter.count_text("gpt-4o", text)
        assert memo.num_recent_chars <= RECENT_MAX_CHARS
    enc = counter.encoding("gpt-4o")
    assert [memo.seen(enc, t) is not None for t in texts] == [False, False, True, True, True, True]


def test_a_callers_digest_keys_the_entry_and_gives_the_plain_ids() -> None:
    import hashlib

    import pytest

    memo = TokenIdsMemo()
    counter = TokenCounter(memo)
    enc = TokenCounter().encoding("gpt-4o")
    block = hashlib.sha256(b"user\0start\0text\0" + HISTORY.encode()).digest()
    assert list(counter.encode("gpt-4o", HISTORY, block)) == enc.encode_ordinary(HISTORY)
    tokens = memo.num_tokens
    copy = "".join(list(HISTORY))  # equal text, another object: found by the same digest
    assert list(counter.encode("gpt-4o", copy, block)) == enc.encode_ordinary(HISTORY)
    assert memo.num_tokens == tokens  # not encoded again
    # another caller digest of the same text is its own entry, with the same ids
    other = hashlib.sha256(b"assistant\0next\0text\0" + HISTORY.encode()).digest()
    assert list(counter.encode("gpt-4o", "".join(list(HISTORY)), other)) == list(
        counter.encode("gpt-4o", "".join(list(HISTORY)))
    )
    assert memo.num_tokens == 3 * tokens  # by `other` and by the memo's own BLAKE2b of the text
    # the digest names an entry per encoding, never another encoding's ids
    cl100k = TokenCounter().encoding("gpt-4").encode_ordinary(HISTORY)
    assert list(counter.encode("gpt-4", "".join(list(HISTORY)), block)) == cl100k
    with pytest.raises(ValueError, match="20"):  # too short: could collide with BLAKE2b keys
        counter.encode("gpt-4o", "".join(list(HISTORY)), b"\0" * 16)
