"""The per-call memos of prompt preparation: tool block texts (by schema identity) and the
normalise options (by tenant policy object). Each gives what the unmemoised path gives, a
reloaded policy takes effect at once, and nothing one tenant's policy decides reaches another."""

from __future__ import annotations

import hashlib

from adapters.types import ChatRequest, Message, TextPart, ToolSpec
from adapters.wire import openai as openai_wire
from cachekeys.canonical import SchemaMemo
from cachekeys.layout import ToolTextMemo, request_blocks
from gateway.core.prompt_cache import PromptCachePort, TiktokenEncoder
from policies.model import TenantPolicy

SECRET = b"secret"
ENCODER = TiktokenEncoder()


def _tools(schemas: SchemaMemo) -> tuple[ToolSpec, ...]:
    return tuple(
        ToolSpec(
            name=f"tool{i}",
            description=f"does thing {i}",
            input_schema=schemas.canonical(
                {"type": "object", "properties": {"p": {"type": "integer"}, "q": {"type": "é"}}}
                if i % 2
                else {"type": "object", "properties": {"x": {"type": "string", "n": i}}}
            ),
        )
        for i in range(6)
    )


def _request(tools: tuple[ToolSpec, ...]) -> ChatRequest:
    return ChatRequest(
        "gpt-4o",
        messages=(Message("user", (TextPart("hello " * 50),)),),
        system=(TextPart("rules"),),
        tools=tools,
    )


def test_tool_text_memo_gives_the_unmemoised_blocks() -> None:
    schemas, memo = SchemaMemo(), ToolTextMemo()
    for _ in range(3):  # a new ChatRequest each call, the schemas shared through SchemaMemo
        request = _request(_tools(schemas))
        assert request_blocks(request, tool_texts=memo) == request_blocks(request)
    assert len(memo) == 6  # one entry per tool: later calls hit


def test_tool_text_memo_misses_on_another_schema_object() -> None:
    memo = ToolTextMemo()
    first = ToolSpec("t", "d", {"type": "object", "properties": {"a": {"type": "string"}}})
    other = ToolSpec("t", "d", {"type": "object", "properties": {"b": {"type": "integer"}}})
    text_a, digest_a = memo.text_and_digest(first)
    text_b, digest_b = memo.text_and_digest(other)
    assert digest_a != digest_b and '"b"' in text_b and '"a"' not in text_b
    block = request_blocks(_request((first,)))[0]
    assert (text_a, digest_a) == (block.text, block.digest)


def test_tool_text_memo_is_bounded() -> None:
    memo = ToolTextMemo(max_entries=4)
    for i in range(10):
        memo.text_and_digest(ToolSpec(f"t{i}", "d", {"type": "object"}))
        assert len(memo) <= 4


def test_tool_text_memo_is_bounded_by_characters() -> None:
    memo = ToolTextMemo(max_chars=400)
    for i in range(3):
        memo.text_and_digest(ToolSpec(f"t{i}", "d" * 100, {"type": "object"}))
        assert len(memo) == [1, 2, 1][i]  # 163 characters each: the third starts afresh
    memo.text_and_digest(ToolSpec("huge", "d" * 400, {"type": "object"}))
    assert len(memo) == 1  # one text past the bound is never kept


def _tenant(name: str, public_system: str | None = None) -> TenantPolicy:
    cache: dict[str, object] = {}
    if public_system is not None:
        digest = hashlib.sha256(public_system.encode()).hexdigest()
        cache["public_prefixes"] = [{"system_sha256": digest}]
    return TenantPolicy.model_validate({"tenant": name, "cache": cache})


BODY = {
    "model": "gpt-4o",
    "messages": [{"role": "system", "content": "rules"}, {"role": "user", "content": "hi"}],
}


def _key(port: PromptCachePort, policy: TenantPolicy) -> object:
    request = openai_wire.decode_request(BODY)
    return port.prepare("openai", BODY, request, policy, "gpt-4o").body["prompt_cache_key"]


def test_options_follow_a_reloaded_policy() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    public_a, public_b = _tenant("a", "rules"), _tenant("b", "rules")
    shared = _key(port, public_a)
    assert shared == _key(port, public_b)  # a public system prompt: one key for both tenants
    reloaded = _tenant("a")  # the admin removed the public prefix: a new policy object
    assert _key(port, reloaded) != shared
    assert _key(port, reloaded) == _key(PromptCachePort(SECRET, encoder=ENCODER), reloaded)
    assert _key(port, public_a) == shared  # the old object still gives what it gave


def test_options_do_not_cross_tenants() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    public = _tenant("a", "rules")
    private = _tenant("b")
    for _ in range(2):
        assert _key(port, public) != _key(port, private)
        fresh = PromptCachePort(SECRET, encoder=ENCODER)
        assert _key(port, private) == _key(fresh, private)
        assert _key(port, public) == _key(fresh, public)


def test_the_port_with_its_memos_prepares_what_the_plain_function_does() -> None:
    """Salts memoised per tenant, token ids keyed by block digest, schemas, tool texts, chain
    segments: call after call, for tenants that alternate, each field equals `prepare`'s."""
    from gateway.core.prompt_cache import prepare

    port = PromptCachePort(SECRET, encoder=ENCODER)
    tools = [
        {
            "type": "function",
            "function": {"name": f"t{i}", "description": "d " * 30, "parameters": {"b": 1, "a": i}},
        }
        for i in (2, 0, 1)
    ]
    tenants = [_tenant("a"), _tenant("b"), _tenant("a", "rules"), _tenant("c")]
    tenants.append(TenantPolicy.model_validate({"tenant": "d", "cache": {"scope": "shared"}}))
    for turn in range(3):
        body = {
            **BODY,
            "tools": tools,
            "messages": [*BODY["messages"], {"role": "user", "content": "x " * (200 + turn)}],
        }
        for policy in tenants:
            request = openai_wire.decode_request(body)
            got = port.prepare("openai", body, request, policy, "gpt-4o")
            want = prepare("openai", body, request, policy.cache, policy.tenant, SECRET, ENCODER)
            assert got.body == want.body and got.request == want.request
            assert (got.cache_salt, got.session_root) == (want.cache_salt, want.session_root)
            assert got.prefix_hashes == want.prefix_hashes and len(got.prefix_hashes) > 10
    salts = {
        policy.tenant: port.prepare(
            "openai", BODY, openai_wire.decode_request(BODY), policy, "gpt-4o"
        ).cache_salt
        for policy in tenants
    }
    assert salts["d"] == "" and len({salts["a"], salts["b"], salts["c"]}) == 3


def test_a_route_no_one_reads_hashes_of_is_not_hashed_and_a_later_walk_starts_over() -> None:
    """Only the routes in `indexed_models` get prefix hashes; the rest of the call is the same,
    and a conversation that moves to an indexed route (its layout reused from a call that was
    not hashed) gets the hashes a fresh port computes."""
    port = PromptCachePort(SECRET, encoder=ENCODER, indexed_models=frozenset({"fleet"}))
    policy = _tenant("a")
    history = [*BODY["messages"], {"role": "user", "content": "x " * 400}]
    for turn, model in enumerate(("lone", "lone", "fleet", "fleet")):
        body = {**BODY, "messages": [*history, {"role": "user", "content": f"turn {turn}"}]}
        got = port.prepare("openai", body, openai_wire.decode_request(body), policy, model)
        fresh = PromptCachePort(SECRET, encoder=ENCODER)
        want = fresh.prepare("openai", body, openai_wire.decode_request(body), policy, model)
        assert (got.body, got.request) == (want.body, want.request)
        assert got.session_root == want.session_root
        if model == "lone":
            assert got.prefix_hashes == ()
        else:
            assert got.prefix_hashes == want.prefix_hashes and len(want.prefix_hashes) > 3
