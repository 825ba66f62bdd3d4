"""gateway/prompt_cache: prepare (edits, keys, hashes), session diagnosis, header, metrics."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry

from adapters.tokens import ENTRY_BYTES, TokenCounter
from adapters.types import Usage
from adapters.wire import anthropic as anthropic_wire
from adapters.wire.codec import codec_for
from cachekeys.blockhash import chain_hashes, tenant_salt
from gateway.core.prompt_cache import PromptCachePort, TiktokenEncoder
from gateway.ports import CacheVerdict
from policies.model import TenantPolicy
from tests.fakes.prompt_cache import PromptCacheFake

SECRET = b"secret"
ENCODER = TiktokenEncoder()


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def tenant(name: str = "acme", **cache: object) -> TenantPolicy:
    return TenantPolicy.model_validate({"tenant": name, "cache": cache})


def anthropic_body(turns: int, system: str = "Follow the rules." + " rule" * 1200) -> dict:
    messages: list[dict] = [{"role": "user", "content": "Fix the failing test." + " a" * 100}]
    for t in range(1, turns):
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{t}", "name": "read", "input": {"p": t}}],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"t{t}", "content": "x" + " b" * 200}
                ],
            }
        )
    tools = [
        {
            "name": n,
            "description": "tool " + n,
            "input_schema": {"type": "object", "properties": {"p": {"type": "integer"}}},
        }
        for n in ("write", "read")
    ]
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 50,
        "system": system,
        "tools": tools,
        "messages": messages,
    }


def prepare(port: PromptCachePort, body: dict, policy: TenantPolicy, wire: str = "anthropic"):  # type: ignore[no-untyped-def]
    codec = codec_for(wire)
    return port.prepare(wire, body, codec.decode_request(body), policy, body["model"])  # type: ignore[arg-type]


def test_prepare_anthropic_orders_marks_and_keys() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    prepared = prepare(port, anthropic_body(2), tenant())
    body = prepared.body
    assert [t["name"] for t in body["tools"]] == ["read", "write"]
    marker = {"type": "ephemeral", "ttl": "5m"}
    assert "cache_control" not in json.dumps(body["tools"])  # tools alone: under 1024 tokens
    assert body["system"] == [
        {"type": "text", "text": anthropic_body(2)["system"], "cache_control": marker}
    ]
    assert body["messages"][-1]["content"][-1]["cache_control"] == marker
    assert "cache_control" not in json.dumps(body["messages"][:-1])
    assert [t.name for t in prepared.request.tools] == ["read", "write"]
    assert prepared.request.system[0].cache_control is not None
    assert prepared.cache_salt == tenant_salt(SECRET, "acme")
    assert prepared.session_root.startswith("lt-")


def test_prefix_hashes_are_the_engine_scheme_over_the_stable_tokens() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    prepared = prepare(port, anthropic_body(1, system="short"), tenant())
    request = prepared.request
    tool_texts = [
        json.dumps(
            {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)},
            separators=(",", ":"),
        )
        for t in request.tools
    ]
    texts = [*tool_texts, "short", request.messages[0].content[0].text]
    ids = [i for text in texts for i in ENCODER.encode(request.model, text, None, "acme")]
    assert prepared.prefix_hashes == chain_hashes(ids, tenant_salt(SECRET, "acme"))
    assert prepared.stable_prefix_tokens == len(ids)


def test_scope_none_and_shared() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    off = prepare(port, anthropic_body(2), tenant(scope="none"))
    assert "cache_control" not in json.dumps(off.body)
    shared_a = prepare(port, anthropic_body(2), tenant("a", scope="shared"))
    shared_b = prepare(port, anthropic_body(2), tenant("b", scope="shared"))
    assert shared_a.cache_salt == "" and shared_a.prefix_hashes == shared_b.prefix_hashes
    private_a = prepare(port, anthropic_body(2), tenant("a"))
    private_b = prepare(port, anthropic_body(2), tenant("b"))
    assert not set(private_a.prefix_hashes) & set(private_b.prefix_hashes)


def test_markers_off_keeps_client_markers() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    body = anthropic_body(1)
    body["messages"][0] = {
        "role": "user",
        "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
    }
    prepared = prepare(port, body, tenant(markers="off"))
    assert json.dumps(prepared.body).count("cache_control") == 1


def test_openai_prompt_cache_key_is_tenant_scoped() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "system", "content": "rules"}, {"role": "user", "content": "hi"}],
    }
    a = prepare(port, body, tenant("a"), "openai")
    b = prepare(port, body, tenant("b"), "openai")
    assert a.body["prompt_cache_key"] != b.body["prompt_cache_key"]
    assert a.request.prompt_cache_key == a.body["prompt_cache_key"]
    assert "prompt_cache_key" not in body
    public = {
        "public_prefixes": [{"system_sha256": __import__("hashlib").sha256(b"rules").hexdigest()}]
    }
    pa = prepare(port, body, tenant("a", **public), "openai")
    pb = prepare(port, body, tenant("b", **public), "openai")
    assert pa.body["prompt_cache_key"] == pb.body["prompt_cache_key"]


def test_observe_reports_each_call_of_a_session() -> None:
    clock = Clock()
    port = PromptCachePort(SECRET, encoder=ENCODER, clock=clock)
    policy = tenant()
    first = port.observe(policy, "s1", prepare(port, anthropic_body(1), policy))
    assert first.header.startswith("first_call; prefix=")
    clock.now_s += 30
    second = prepare(port, anthropic_body(2), policy)
    verdict = port.observe(policy, "s1", second)
    body = json.loads(verdict.diagnosis_json)
    assert body["reason"] == "kept" and body["call"] == 1 and body["tenant"] == "acme"
    assert (
        verdict.header
        == f"kept; prefix={second.stable_prefix_tokens}; expected={body['expected_prefix_tokens']}; read={body['expected_prefix_tokens']}"
    )
    clock.now_s += 10
    changed = anthropic_body(3, system="New rules at 2026-11-30T10:00:00Z." + " rule" * 1200)
    verdict = port.observe(policy, "s1", prepare(port, changed, policy))
    assert verdict.header.startswith("system_changed; block=system[0]; ")
    clock.now_s += 301
    verdict = port.observe(
        policy, "s1", prepare(port, anthropic_body(4, system=changed["system"]), policy)
    )
    assert verdict.header.startswith("ttl_expired; ")


def test_relocation_keeps_the_prefix_across_a_timestamp() -> None:
    clock = Clock()
    port = PromptCachePort(SECRET, encoder=ENCODER, clock=clock)
    policy = tenant(normalise={"relocate_volatile": True})
    port.observe(
        policy,
        "s",
        prepare(port, anthropic_body(1, system="Now 2026-11-30T10:00:00Z." + " r" * 1100), policy),
    )
    clock.now_s += 5
    verdict = port.observe(
        policy,
        "s",
        prepare(port, anthropic_body(2, system="Now 2026-11-30T10:00:05Z." + " r" * 1100), policy),
    )
    assert verdict.header.startswith("kept; ")


def test_tracker_is_bounded() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER, max_sessions=2)
    policy = tenant()
    prepared = prepare(port, anthropic_body(1), policy)
    for session in ("a", "b", "c"):
        port.observe(policy, session, prepared)
    assert len(port.tracker) == 2
    assert port.observe(policy, "a", prepared).header.startswith("first_call")  # "a" was evicted


def test_predictions_match_the_fake_provider_and_metrics_count_them() -> None:
    clock = Clock()
    registry = CollectorRegistry()
    port = PromptCachePort(SECRET, encoder=ENCODER, clock=clock, registry=registry)
    fake = PromptCacheFake(clock)
    counter = TokenCounter()
    policy = tenant()
    reads = []
    for turns in (1, 2, 3):
        prepared = prepare(port, anthropic_body(turns), policy)
        verdict = port.observe(policy, "s", prepared)
        prompt = counter.count_request(anthropic_wire.decode_request(prepared.body))
        _, read, write = fake.account("anthropic", dict(prepared.body), prompt)
        port.reconcile(verdict, Usage(prompt - read - write, 5, read, write))
        reads.append((json.loads(verdict.diagnosis_json)["predicted_read_tokens"], read))
        clock.now_s += 20
    assert reads[0] == (0, 0) and all(r > 0 for _, r in reads[1:])
    for predicted, reported in reads[1:]:
        assert abs(predicted - reported) <= 0.05 * reported  # tokenizer slack only
    assert (
        registry.get_sample_value("lantern_cache_calls_total", {"tenant": "acme", "reason": "kept"})
        == 2
    )
    assert registry.get_sample_value(
        "lantern_cache_reported_read_tokens_total", {"tenant": "acme"}
    ) == sum(r for _, r in reads)
    assert (
        registry.get_sample_value(
            "lantern_cache_prediction_misses_total", {"tenant": "acme", "direction": "less"}
        )
        is None
    )


def test_reconcile_flags_an_unforeseen_break() -> None:
    registry = CollectorRegistry()
    port = PromptCachePort(SECRET, encoder=ENCODER, registry=registry)
    verdict = CacheVerdict("kept", json.dumps({"tenant": "acme", "predicted_read_tokens": 30000}))
    port.reconcile(verdict, Usage(30000, 1, 0, 0))
    assert (
        registry.get_sample_value(
            "lantern_cache_prediction_misses_total", {"tenant": "acme", "direction": "less"}
        )
        == 1
    )


def test_another_tenants_call_with_the_same_session_id_is_its_own_session() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    acme, globex = tenant("acme"), tenant("globex")
    port.observe(acme, "shared-id", prepare(port, anthropic_body(1), acme))
    verdict = port.observe(globex, "shared-id", prepare(port, anthropic_body(2), globex))
    assert verdict.header.startswith("first_call; ")  # nothing of acme's call shows
    verdict = port.observe(acme, "shared-id", prepare(port, anthropic_body(2), acme))
    assert verdict.header.startswith("kept; ")  # acme's session saw no other tenant
    assert json.loads(verdict.diagnosis_json)["call"] == 1


def test_canonical_request_carries_the_key_for_translated_calls() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    prepared = prepare(port, anthropic_body(1), tenant())
    assert (
        prepared.request.prompt_cache_key is not None
        and prepared.request.prompt_cache_key.startswith("lt-")
    )
    assert "prompt_cache_key" not in prepared.body  # never added to an Anthropic body
    assert prepare(port, anthropic_body(1), tenant(scope="none")).request.prompt_cache_key is None


def test_request_level_marker_leaves_room_in_the_four_slots() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    body = {**anthropic_body(3), "cache_control": {"type": "ephemeral"}}
    body["tools"] = [{**t, "description": t["description"] + " x" * 600} for t in body["tools"]]
    prepared = prepare(port, body, tenant())
    assert json.dumps(prepared.body).count('"cache_control"') == 4  # 3 of Lantern's + the client's
    fake = PromptCacheFake(Clock())
    counter = TokenCounter()
    prompt = counter.count_request(anthropic_wire.decode_request(prepared.body))
    assert fake.account("anthropic", dict(prepared.body), prompt)[2] > 0  # accepted: at most 4


def test_encoder_memo_is_bounded_and_exact() -> None:
    one_entry = 4 * 3 + ENTRY_BYTES  # three token ids and the entry's own overhead
    encoder = TiktokenEncoder(max_cached_bytes=one_entry + 4)
    counter = TokenCounter()
    first = list(encoder.encode("gpt-4o", "one two three", None, "acme"))
    assert first == counter.encoding("gpt-4o").encode_ordinary("one two three")
    assert encoder.num_cached_tokens == 3
    encoder.encode("gpt-4o", "four five six", None, "acme")
    assert encoder.num_cached_tokens == 3  # the first entry was evicted to stay under the bound
    assert list(encoder.encode("gpt-4o", "one two three", None, "acme")) == first
