"""The memoised prefix hashes against the reference `keys.prefix_hashes`, call after call."""

from __future__ import annotations

from adapters.types import ChatRequest, Message, TextPart, ToolSpec
from cachekeys.blockhash import ROOT_PARENT, chain_hashes
from cachekeys.chain_memo import PrefixHashMemo, extend_chain
from cachekeys.keys import prefix_hashes
from cachekeys.layout import PromptLayout, request_blocks
from cachekeys.normalise import PublicPrefix

TOOL = ToolSpec(name="search", description="Search the web", input_schema={"type": "object"})


def _request(turns: list[str], system: str = "You are careful.") -> ChatRequest:
    messages = tuple(
        Message(role="user" if i % 2 == 0 else "assistant", content=(TextPart(t),))
        for i, t in enumerate(turns)
    )
    return ChatRequest(model="gpt-4o", messages=messages, system=(TextPart(system),), tools=(TOOL,))


def _layout(
    request: ChatRequest, public: PublicPrefix = PublicPrefix()
) -> tuple[PromptLayout, list[list[int]]]:
    blocks = request_blocks(request, public)
    # ids stand in for a tokenizer: a pure function of the block's text
    ids = [[(ord(c) * 31 + k) % 50_000 for k, c in enumerate(b.text)] for b in blocks]
    return PromptLayout(blocks, tuple(len(i) for i in ids)), ids


def test_memo_matches_reference_over_a_growing_session() -> None:
    memo = PrefixHashMemo()
    turns: list[str] = []
    for t in range(12):
        turns += [f"user turn {t} " * (t + 3), f"assistant reply {t} " * (2 * t + 1)]
        for salt in ("", "tenant-a-salt"):
            layout, ids = _layout(_request(turns))
            assert memo.prefix_hashes(layout, ids, salt, "gpt-4o") == prefix_hashes(
                layout, ids, salt
            )
    assert memo.num_segments > 0


def test_memo_keeps_public_blocks_unsalted() -> None:
    system = "Shared rules for every tenant. " * 20
    public = PublicPrefix(tool_names=frozenset({"search"}))
    memo = PrefixHashMemo()
    for t in range(4):
        layout, ids = _layout(_request([f"question {t} " * 9], system), public)
        assert layout.public_tokens() > 16
        expected = prefix_hashes(layout, ids, "salt-b")
        assert memo.prefix_hashes(layout, ids, "salt-b", "gpt-4o") == expected
        assert expected[0] == prefix_hashes(layout, ids, "salt-c")[0]  # the tool block is shared


def test_a_different_salt_or_tokenizer_never_reuses_segments() -> None:
    memo = PrefixHashMemo()
    layout, ids = _layout(_request(["hello " * 40]))
    a = memo.prefix_hashes(layout, ids, "salt-a", "gpt-4o")
    b = memo.prefix_hashes(layout, ids, "salt-b", "gpt-4o")
    assert a != b and b == prefix_hashes(layout, ids, "salt-b")
    other_ids = [[i + 1 for i in block] for block in ids]
    c = memo.prefix_hashes(layout, other_ids, "salt-a", "gpt-4")
    assert c == prefix_hashes(layout, other_ids, "salt-a")


def test_memo_is_bounded_and_stays_exact_after_eviction() -> None:
    memo = PrefixHashMemo(max_hashes=40)
    for t in range(6):
        layout, ids = _layout(_request([f"turn {t} " * 60, "reply " * 30]))
        assert memo.prefix_hashes(layout, ids, "s", "gpt-4o") == prefix_hashes(layout, ids, "s")
    assert memo.num_segments <= 40


def test_extend_chain_resumes_where_a_chain_stopped() -> None:
    ids = list(range(100))
    whole = chain_hashes(ids, "s")
    first = extend_chain(ROOT_PARENT, 0, (), ids[:37], "s", 0)
    rest = extend_chain(first.hashes[-1], len(first.hashes), first.pending, ids[37:], "s", 0)
    assert first.hashes + rest.hashes == whole
    assert rest.pending == tuple(ids[96:])
