"""Keys of a prompt: OpenAI prompt_cache_key, session root, prefix hashes over the stable prefix."""

from __future__ import annotations

from dataclasses import replace

from adapters.types import Message, TextPart
from cachekeys.blockhash import chain_hashes, tenant_salt
from cachekeys.keys import prefix_hashes, prompt_cache_key, session_root
from cachekeys.layout import PromptLayout, request_blocks, system_digest_hex
from cachekeys.normalise import PublicPrefix
from tests.cachekeys.conftest import agent_request


def layout(request, public=PublicPrefix()):  # type: ignore[no-untyped-def]
    return PromptLayout.count(request_blocks(request, public), lambda text: len(text.encode()))


def ids(lay: PromptLayout) -> list[list[int]]:
    return [list(b.text.encode()) for b in lay.blocks]


SALT = tenant_salt(b"s", "acme")


def test_prompt_cache_key_depends_on_tools_and_system_only() -> None:
    a, b = agent_request(turns=1), agent_request(turns=3)
    assert prompt_cache_key(layout(a), SALT) == prompt_cache_key(layout(b), SALT)
    other_system = replace(a, system=(TextPart("other"),))
    assert prompt_cache_key(layout(other_system), SALT) != prompt_cache_key(layout(a), SALT)


def test_client_key_is_scoped_not_forwarded() -> None:
    key = prompt_cache_key(layout(agent_request()), SALT, "user-42")
    assert key != "user-42" and "user-42" not in key
    assert key != prompt_cache_key(layout(agent_request()), tenant_salt(b"s", "globex"), "user-42")


def test_session_root_is_the_first_message_not_later_ones() -> None:
    a, b = agent_request(turns=1), agent_request(turns=4)
    assert session_root(layout(a), SALT) == session_root(layout(b), SALT)
    forked = replace(a, messages=(Message("user", (TextPart("Another task."),)),))
    assert session_root(layout(forked), SALT) != session_root(layout(a), SALT)


def test_prefix_hashes_cover_the_stable_prefix_only() -> None:
    tail = TextPart("<volatile-context>\n{{volatile:1}} = 10:15")
    request = agent_request(turns=1)
    with_tail = replace(request, messages=(Message("user", (*request.messages[0].content, tail)),))
    lay = layout(request)
    flat = [i for block in ids(lay) for i in block]
    assert prefix_hashes(lay, ids(lay), SALT) == chain_hashes(flat, SALT)
    tail_layout = layout(with_tail)
    assert prefix_hashes(tail_layout, ids(tail_layout), SALT) == prefix_hashes(lay, ids(lay), SALT)


def test_public_tools_hash_without_salt() -> None:
    request = agent_request(turns=1, tools=("search",))
    public = PublicPrefix(tool_names=frozenset({"search"}))
    lay = layout(request, public)
    tool_tokens = lay.tokens[0]
    hashes = prefix_hashes(lay, ids(lay), SALT)
    flat = [i for block in ids(lay) for i in block]
    assert hashes[: tool_tokens // 16] == chain_hashes(flat[: tool_tokens // 16 * 16], "")
    assert lay.public_tokens() == tool_tokens


def test_public_head_counts_the_leading_public_run_only() -> None:
    rules = TextPart("Shared rules.")
    request = replace(
        agent_request(turns=1, tools=("search",)),
        system=(rules, TextPart("Acme's own prompt.")),
    )
    both = PublicPrefix(
        tool_names=frozenset({"search"}), system_sha256=frozenset({system_digest_hex(rules.text)})
    )
    assert layout(request, both).public_head() == (1, 1)
    tools_only = PublicPrefix(tool_names=frozenset({"search"}))
    assert layout(request, tools_only).public_head() == (1, 0)
    # a private tool ahead of it ends the run: the public system block is not in the head
    system_only = PublicPrefix(system_sha256=frozenset({system_digest_hex(rules.text)}))
    assert layout(request, system_only).public_head() == (0, 0)
    assert layout(request).public_head() == (0, 0)
