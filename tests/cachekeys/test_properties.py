"""Properties (hypothesis): normalisation is idempotent, keeps the messages and their order, and
two tenants' private prefixes never share a key while a declared public prefix does."""

from __future__ import annotations

import json
import string
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.types import ChatRequest, Message, TextPart, ToolResultPart, ToolSpec, ToolUsePart
from adapters.wire import openai as openai_wire
from cachekeys.blockhash import tenant_salt
from cachekeys.keys import prefix_hashes, prompt_cache_key, session_root
from cachekeys.layout import PromptLayout, request_blocks, system_digest_hex
from cachekeys.normalise import NormaliseOptions, PublicPrefix, normalise
from cachekeys.volatile import VolatileMatcher, is_volatile_block
from gateway.core.prompt_view import typed_view
from tests.cachekeys.conftest import normalised

SECRET = b"server-secret"
names = st.text(string.ascii_lowercase + "_", min_size=1, max_size=8)
json_leaf = st.one_of(st.integers(-5, 5), st.booleans(), st.text(max_size=4), st.none())
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(names, inner, max_size=4)),
    max_leaves=10,
)
volatile_text = st.lists(
    st.sampled_from(
        [
            "Now ",
            "2026-11-30T09:18:42Z",
            " at 3:07 PM",
            " req_abcdef123",
            " plain words",
            "{x}",
            "\n",
        ]
    ),
    max_size=6,
).map("".join)


@st.composite
def requests(draw: st.DrawFn) -> ChatRequest:
    tool_names = draw(st.lists(names, max_size=5, unique=True))
    tools = tuple(
        ToolSpec(n, draw(volatile_text), draw(st.dictionaries(names, json_value, max_size=4)))
        for n in tool_names
    )
    roles = draw(st.lists(st.sampled_from(["user", "assistant", "tool"]), min_size=1, max_size=6))
    messages = []
    for i, role in enumerate(roles):
        text = TextPart(draw(volatile_text.filter(bool)))  # providers reject empty turns
        parts: list[TextPart | ToolUsePart | ToolResultPart] = [
            ToolResultPart(f"c{i}", (text,)) if role == "tool" else text
        ]
        if role == "assistant" and draw(st.booleans()):
            args = draw(st.dictionaries(names, json_value, max_size=3))
            parts.append(ToolUsePart(f"c{i}", "t", json.dumps(args)))
        messages.append(Message(role, tuple(parts)))
    system = tuple(TextPart(draw(volatile_text)) for _ in range(draw(st.integers(0, 2))))
    return ChatRequest(
        model="claude-sonnet-4-5", messages=tuple(messages), system=system, tools=tools
    )


options_st = st.builds(
    NormaliseOptions,
    order_tools=st.booleans(),
    canonical_json=st.booleans(),
    canonical_tool_args=st.booleans(),
    relocate_volatile=st.booleans(),
    volatile=st.builds(
        VolatileMatcher.build,
        st.lists(st.sampled_from([r"\d+", r"[a-z]+_\w+", r"volatile", r"\{x\}"]), max_size=2),
        st.booleans(),
    ),
)


@settings(max_examples=60, deadline=None)
@given(requests(), options_st)
def test_normalisation_is_idempotent(request: ChatRequest, options: NormaliseOptions) -> None:
    once = normalised(request, options)
    assert normalised(once, options) == once


@settings(max_examples=60, deadline=None)
@given(requests(), options_st)
def test_messages_kept_in_order_only_a_tail_block_added(
    request: ChatRequest, options: NormaliseOptions
) -> None:
    out = normalised(request, options)
    assert len(out.messages) in (len(request.messages), len(request.messages) + 1)
    for before, after in zip(request.messages, out.messages, strict=False):
        assert after.role == before.role
        extra = after.content[len(before.content) :]
        assert all(isinstance(p, TextPart) and is_volatile_block(p.text) for p in extra)
        for a, b in zip(before.content, after.content, strict=False):
            if options.canonical_tool_args and isinstance(a, ToolUsePart):
                assert isinstance(b, ToolUsePart) and (b.id, b.name) == (a.id, a.name)
            else:
                assert b == a  # history is never rewritten
    assert sorted(t.name for t in out.tools) == sorted(t.name for t in request.tools)


@settings(max_examples=40, deadline=None)
@given(requests(), st.randoms(use_true_random=False))
def test_tool_order_and_key_order_do_not_change_the_normalised_prefix(
    request: ChatRequest, rng
) -> None:
    tools = list(request.tools)
    rng.shuffle(tools)
    shuffled_keys = tuple(
        replace(t, input_schema=dict(reversed(list(t.input_schema.items())))) for t in tools
    )
    options = NormaliseOptions()
    a = normalised(request, options)
    b = normalised(replace(request, tools=shuffled_keys), options)
    assert [block.digest for block in request_blocks(a)] == [
        block.digest for block in request_blocks(b)
    ]
    assert [list(t.input_schema) for t in a.tools] == [list(t.input_schema) for t in b.tools]


def _keys(
    request: ChatRequest, tenant: str, public: PublicPrefix
) -> tuple[str, str, tuple[bytes, ...]]:
    layout = PromptLayout.count(request_blocks(request, public), lambda text: len(text.encode()))
    ids = [list(b.text.encode()) for b in layout.blocks]
    salt = tenant_salt(SECRET, tenant)
    return (
        prompt_cache_key(layout, salt),
        session_root(layout, salt),
        prefix_hashes(layout, ids, salt),
    )


@settings(max_examples=40, deadline=None)
@given(requests(), names, names)
def test_two_tenants_never_share_private_keys(request: ChatRequest, a: str, b: str) -> None:
    if a == b:
        return
    key_a, root_a, hashes_a = _keys(request, a, PublicPrefix())
    key_b, root_b, hashes_b = _keys(request, b, PublicPrefix())
    assert key_a != key_b and root_a != root_b
    assert not set(hashes_a) & set(hashes_b)
    assert key_a.startswith("lt-") and len(key_a) == 35 and SECRET.decode() not in key_a


@settings(max_examples=40, deadline=None)
@given(requests(), names, names, st.text(min_size=40, max_size=80))
def test_a_declared_public_prefix_is_shared(
    request: ChatRequest, a: str, b: str, shared: str
) -> None:
    if a == b:
        return
    request = replace(request, tools=(), system=(TextPart(shared),))
    public = PublicPrefix(system_sha256=frozenset({system_digest_hex(shared)}))
    key_a, root_a, hashes_a = _keys(request, a, public)
    key_b, root_b, hashes_b = _keys(request, b, public)
    assert key_a == key_b  # the stable prefix is all public: OpenAI routing key shared
    assert root_a != root_b  # the conversation root includes private messages
    num_public = len(shared.encode()) // 16
    assert hashes_a[:num_public] == hashes_b[:num_public] and num_public >= 2
    assert not set(hashes_a[num_public:]) & set(hashes_b[num_public:])


@settings(max_examples=40, deadline=None)
@given(requests(), options_st)
def test_the_typed_view_equals_decoding_the_normalised_body(
    request: ChatRequest, options: NormaliseOptions
) -> None:
    """The typed request (only edited parts decoded again) is the forwarded body decoded in
    full, and normalising the body is idempotent."""
    body = openai_wire.encode_request(request)
    once = normalise("openai", body, options)
    assert normalise("openai", once, options) == once
    view = typed_view("openai", body, once, openai_wire.decode_request(body))
    assert view == openai_wire.decode_request(once)
