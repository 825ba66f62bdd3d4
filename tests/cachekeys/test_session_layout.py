"""The per-conversation layout memo (`cachekeys.session_layout`): a call that re-sends its
previous call's history reuses that call's blocks, token ids and hash chain, and everything
`prepare` hands downstream is what the plain, unmemoised function gives, for random agent
histories (appends, edits in the middle, tool-list and system changes, tenants that share a
session id, model and wire changes). Plus the bounds and the tenant scoping of its keys."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.tokens import TokenCounter, TokenIdsMemo
from adapters.types import ChatRequest, Message, TextPart, ToolUsePart
from adapters.wire import openai as openai_wire
from adapters.wire.codec import codec_for
from cachekeys.layout import request_blocks
from cachekeys.session_layout import LayoutEntry, SessionLayoutMemo
from gateway.core.cache_autopilot import CacheAutopilot, with_steering
from gateway.core.prompt_cache import (
    PromptCachePort,
    PromptFacts,
    SessionCacheTracker,
    TiktokenEncoder,
    prepare,
)
from policies.model import TenantPolicy

SECRET = b"secret"
ENCODER = TiktokenEncoder()
SYSTEMS = (
    "You are a careful agent. " * 30,
    "You are terse. " * 25,
    "Today is 2026-12-01. Be brief.",
)


def _tenant(name: str, **cache: Any) -> TenantPolicy:
    return TenantPolicy.model_validate({"tenant": name, "cache": cache})


TENANTS = (
    _tenant("a"),
    _tenant("b"),  # same session ids as "a": must never see a's entries
    _tenant(
        "pub",
        public_prefixes=[{"system_sha256": hashlib.sha256(SYSTEMS[0].encode()).hexdigest()}],
    ),
    _tenant("shared", scope="shared"),
    _tenant("vol", normalise={"relocate_volatile": True}, ttl="1h"),
    _tenant("plain", markers="off", normalise={"canonical_json": False}),
)


def _tool(i: int, variant: int) -> dict[str, Any]:
    # 1, 1.0 and true are equal in Python and different in JSON: a memo keyed on == would mix them
    value: Any = (1, 1.0, True)[variant % 3]
    return {
        "name": f"tool_{i}",
        "description": f"does thing {i} " * 8,
        "input_schema": {"type": "object", "properties": {"x": {"type": "integer", "n": value}}},
    }


class Conversation:
    """An agent's state, rendered to either wire's body."""

    def __init__(self) -> None:
        self.system = 0
        self.tools = [(i, 0) for i in range(4)]
        self.turns: list[tuple[str, str]] = [("user", "step 0 observed value 0. " * 60)]
        self.calls = 0

    def apply(self, op: int, arg: int) -> None:
        n = len(self.turns)
        if op <= 3:  # an append: the common case
            role = "assistant" if self.turns[-1][0] == "user" else "user"
            self.turns.append((role, f"turn {self.calls} {arg} " * (1 + arg % 40)))
        elif op == 4 and n > 1:  # an edit in the middle
            i = arg % (n - 1)
            self.turns[i] = (self.turns[i][0], f"rewritten {arg} " * 20)
        elif op == 5:
            self.tools = self.tools[1:] + self.tools[:1]  # the client reorders its tools
        elif op == 6:
            i = arg % len(self.tools)
            self.tools[i] = (self.tools[i][0], self.tools[i][1] + 1)
        elif op == 7:
            self.system = arg % len(SYSTEMS)
        elif op == 8 and n > 2:
            self.turns = self.turns[: n - 1 - arg % 2]  # history truncated
        elif op == 9:
            self.tools.append((len(self.tools) + arg % 3, 0))
        elif op == 10:  # the first turn edited, its length kept (the memo's key uses it)
            role, text = self.turns[0]
            self.turns[0] = (role, f"{arg % 10}{text[1:]}")

    def body(self, wire: str, model: str) -> dict[str, Any]:
        tools = [_tool(i, v) for i, v in self.tools]
        messages: list[dict[str, Any]] = [{"role": r, "content": t} for r, t in self.turns]
        if messages[-1]["role"] != "user":
            messages.append({"role": "user", "content": f"go on {self.calls}"})
        if wire == "anthropic":
            return {
                "model": model,
                "max_tokens": 16,
                "system": SYSTEMS[self.system],
                "tools": tools,
                "messages": messages,
            }
        return {
            "model": model,
            "max_tokens": 16,
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": t["name"],
                        "description": t["description"],
                        "parameters": t["input_schema"],
                    },
                }
                for t in tools
            ],
            "messages": [{"role": "system", "content": SYSTEMS[self.system]}, *messages],
        }


KEEP = None  # a step mostly keeps who sends it, the wire, the model and the session id


def _sometimes(*values: Any) -> st.SearchStrategy[Any]:
    return st.sampled_from([KEEP] * 5 + list(values))


STEPS = st.lists(
    st.tuples(
        st.integers(0, 10),  # op
        st.integers(0, 1000),  # its argument
        _sometimes(*range(len(TENANTS))),  # who sends the call
        _sometimes("openai", "anthropic"),
        _sometimes("gpt-4o-mini", "claude-sonnet-4"),
        _sometimes("", "s1", "s2"),  # the client's session id ("": none)
        _sometimes("", "k1", "k2"),  # the client's prompt_cache_key ("": none)
    ),
    min_size=1,
    max_size=20,
)


def _decode(wire: str, body: dict[str, Any], session: str, client_key: str) -> ChatRequest:
    request = codec_for(wire).decode_request(body)
    return replace(request, session_id=session or None, prompt_cache_key=client_key or None)


@settings(max_examples=120, deadline=None)
@given(STEPS)
def test_memoised_prepare_equals_the_plain_function(steps: list[tuple[Any, ...]]) -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    reference = SessionCacheTracker()
    pilot = CacheAutopilot(port._clock)  # the reference's own autopilot memory
    conversation = Conversation()
    who, wire, model, session, client_key = 0, "openai", "gpt-4o-mini", "", ""
    for now, (op, arg, *changes) in enumerate(steps):
        who, wire, model, session, client_key = (
            old if new is KEEP else new
            for old, new in zip((who, wire, model, session, client_key), changes, strict=True)
        )
        conversation.apply(op, arg)
        conversation.calls += 1
        tenant = TENANTS[who]
        body = conversation.body(wire, model)
        got = port.prepare(wire, body, _decode(wire, body, session, client_key), tenant, model)
        want = prepare(
            wire,
            body,
            _decode(wire, body, session, client_key),
            tenant.cache,
            tenant.tenant,
            SECRET,
            ENCODER,
            steer=lambda layout, salt, root, t=tenant: pilot.steer(
                t.cache, t.tenant, layout, salt, root
            ),
        )
        assert got.body == want.body
        assert got.request == want.request
        assert (got.session_root, got.cache_salt) == (want.session_root, want.cache_salt)
        assert got.prefix_hashes == want.prefix_hashes
        assert got.stable_prefix_tokens == want.stable_prefix_tokens
        assert isinstance(got.diagnosis, PromptFacts) and isinstance(want.diagnosis, PromptFacts)
        assert got.diagnosis.layout == want.diagnosis.layout  # blocks, digests, token counts
        assert got.diagnosis.fingerprint == want.diagnosis.fingerprint
        assert got.diagnosis.prompt_cache_key == want.diagnosis.prompt_cache_key
        assert [list(i) for i in got.diagnosis.block_ids] == [
            list(i) for i in want.diagnosis.block_ids
        ]
        session_id = session or got.session_root
        verdict = port.observe(tenant, session_id, got)
        expected = reference.observe(tenant.tenant, session_id, want, port._clock())
        assert want.diagnosis.steering is not None
        assert want.diagnosis.layout is not None
        pilot.remember(tenant.tenant, want.diagnosis.steering, want.diagnosis.layout)
        assert verdict.header == expected.header_value()
        want_json = with_steering(expected.to_json(), want.diagnosis.steering)
        # gap_s is measured by each tracker's own clock reading: compare everything else
        assert _without_gap(verdict.diagnosis_json) == _without_gap(want_json)
        answer = Message("assistant", (TextPart(f"answer {now} " * 5),))
        fresh = PromptCachePort(SECRET, encoder=ENCODER)
        assert port.answer_hashes(wire, tenant, got, answer) == fresh.answer_hashes(
            wire, tenant, want, answer
        )


def _without_gap(report_json: str) -> dict[str, Any]:
    body = orjson.loads(report_json)
    body.pop("gap_s")
    return dict(body)


def _tool_fn(i: int) -> dict[str, Any]:
    return {
        "name": f"t{i}",
        "description": "d " * 10,
        "parameters": {"type": "object", "properties": {"a": {"type": "string"}}},
    }


AGENT = {
    "model": "gpt-4o-mini",
    "tools": [{"type": "function", "function": _tool_fn(i)} for i in range(3)],
    "messages": [
        {"role": "system", "content": "rules " * 50},
        {"role": "user", "content": "history " * 400},
    ],
}


def _turn(n: int) -> dict[str, Any]:
    return {**AGENT, "messages": [*AGENT["messages"], {"role": "user", "content": f"turn {n}"}]}


def test_an_appended_turn_reuses_the_history() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    tenant = TENANTS[0]
    first = port.prepare("openai", _turn(0), openai_wire.decode_request(_turn(0)), tenant, "m")
    layouts = port._memos.layouts
    assert len(layouts) == 1 and layouts.hits == 0
    second = port.prepare("openai", _turn(1), openai_wire.decode_request(_turn(1)), tenant, "m")
    assert layouts.hits == 1
    # tools, system and the long history came from the entry; only the last turn was laid out
    assert layouts.reused_blocks == 3 + 1 + 1
    assert second.prefix_hashes[:-1] == first.prefix_hashes[:-1]
    other = port.prepare("openai", _turn(1), openai_wire.decode_request(_turn(1)), TENANTS[1], "m")
    assert layouts.hits == 1  # another tenant: its own key, no hit
    assert other.cache_salt != second.cache_salt
    assert set(other.prefix_hashes).isdisjoint(second.prefix_hashes)


def test_the_shared_history_is_the_previous_calls_objects() -> None:
    """Equal values either way; the same objects, so the token counter's identity memo knows
    the re-sent history's strings and counts them without hashing them again."""
    counter = TokenCounter(TokenIdsMemo())
    port = PromptCachePort(SECRET, encoder=TiktokenEncoder(counter=counter))
    tenant = TENANTS[0]
    bodies = [orjson.loads(orjson.dumps(_turn(n))) for n in range(3)]  # new strings each call
    calls = [port.prepare("openai", b, openai_wire.decode_request(b), tenant, "m") for b in bodies]
    request = openai_wire.decode_request(_turn(2))
    plain = prepare("openai", _turn(2), request, tenant.cache, tenant.tenant, SECRET, ENCODER)
    assert calls[2].request == plain.request
    first, second, third = (c.request for c in calls)
    assert [p.text for p in second.system] == [p.text for p in first.system]
    assert second.messages[0].content[0].text is first.messages[0].content[0].text  # type: ignore[union-attr]
    assert third.messages[0].content[0].text is first.messages[0].content[0].text  # type: ignore[union-attr]
    assert counter.memo is not None
    hashed: list[str] = []
    lookup = counter.memo._lookup
    counter.memo._lookup = lambda enc, text, digest, scope: (
        hashed.append(text) or lookup(enc, text, digest, scope)
    )  # type: ignore[method-assign]
    for call in calls[1:]:
        counter.count_request(call.request, tenant.tenant)  # as the gateway counts: its tenant
    # each call's count read its history by identity: only the tools' JSON (made anew) is hashed
    assert hashed and all(text.startswith('[{"name":"t0"') for text in hashed)


def test_keys_are_tenant_scoped_and_an_entry_needs_its_salt() -> None:
    memo = SessionLayoutMemo()
    request = replace(openai_wire.decode_request(_turn(0)), session_id="s")
    assert memo.key("a", "openai", request) != memo.key("b", "openai", request)
    options = object()
    entry = LayoutEntry.of(options, "salt-a", request, _blocks(request), _ids(request), (0, (), ()))
    key = memo.key("a", "openai", request)
    memo.remember(key, entry)
    assert memo.match(key, request, options, "salt-a") is not None
    assert memo.match(key, request, options, "salt-b") is None  # another salt: no reuse
    assert memo.match(key, request, object(), "salt-a") is None  # other options: no reuse
    assert memo.match(memo.key("b", "openai", request), request, options, "salt-a") is None


def _blocks(request: ChatRequest) -> Any:
    return request_blocks(request)


def _ids(request: ChatRequest) -> Any:
    return tuple(ENCODER.encode(request.model, b.text, b.digest, "acme") for b in _blocks(request))


def test_the_memo_is_bounded_by_entries_and_characters() -> None:
    memo = SessionLayoutMemo(max_entries=3, max_chars=10_000)
    for i in range(8):
        text = "x" * (1000 * (i % 4 + 1))
        request = ChatRequest("m", messages=(Message("user", (TextPart(text),)),))
        request = replace(request, session_id=f"s{i}")
        entry = LayoutEntry.of(None, "", request, _blocks(request), _ids(request), (0, (), ()))
        memo.remember(memo.key("t", "openai", request), entry)
        assert len(memo) <= 3 and memo.num_chars <= 10_000
    huge = ChatRequest("m", messages=(Message("user", (TextPart("y" * 20_000),)),))
    entry = LayoutEntry.of(None, "", huge, _blocks(huge), _ids(huge), (0, (), ()))
    memo.remember(memo.key("t", "openai", huge), entry)
    assert memo.match(memo.key("t", "openai", huge), huge, None, "") is None  # never held


def test_a_tool_call_in_the_history_is_compared_exactly() -> None:
    """`arguments_json` is text: a re-spaced argument is another block."""
    memo = SessionLayoutMemo()
    base = ChatRequest(
        "m",
        messages=(
            Message("user", (TextPart("go"),)),
            Message("assistant", (ToolUsePart("c1", "t", '{"a":1}'),)),
        ),
    )
    entry = LayoutEntry.of(None, "", base, _blocks(base), _ids(base), (0, (), ()))
    key = memo.key("t", "openai", base)
    memo.remember(key, entry)
    spaced = replace(
        base,
        messages=(base.messages[0], Message("assistant", (ToolUsePart("c1", "t", '{"a": 1}'),))),
    )
    found = memo.match(key, spaced, None, "")
    assert found is not None and found.messages == 1
