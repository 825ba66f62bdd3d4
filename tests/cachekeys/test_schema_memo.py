"""`SchemaMemo` (the fast path) gives exactly what `canonical_schema` (the reference) gives,
on wire bodies and the typed requests read back, first call and memoised calls alike."""

from __future__ import annotations

import json

from adapters.wire import openai as openai_wire
from cachekeys.canonical import SchemaMemo, canonical_schema
from cachekeys.normalise import NormaliseOptions, normalise
from tests.cachekeys.conftest import agent_request, normalised

SCHEMAS = [
    {"type": "object", "required": ["z", "a"], "properties": {"z": {"enum": ["b", "a"]}}},
    {"required": ["a", "z"], "type": "object", "properties": {"z": {"enum": ["b", "a"]}}},
    {"type": "object", "properties": {"n": {"type": "number", "default": 1.0}}},
    {"type": "object", "properties": {"n": {"type": "number", "default": 1}}},
    {"anyOf": [{"type": "string"}, {"type": "null"}], "required": [1, "a"]},
    {"big": 2**70, "required": ["b", "a"]},  # not plain JSON for the memo's key: no memo
    [],
    "leaf",
]


def test_memo_equals_reference_first_and_memoised() -> None:
    memo = SchemaMemo(max_entries=3)  # small: the bound is crossed too
    for _ in range(3):
        for schema in SCHEMAS:
            got, want = memo.canonical(schema), canonical_schema(schema)
            assert got == want
            assert json.dumps(got) == json.dumps(want)  # key order and int/float kept


def test_normalise_with_memo_equals_without() -> None:
    plain, memoised = NormaliseOptions(), NormaliseOptions(schemas=SchemaMemo())
    request = agent_request(tools=("search", "edit", "ask"))
    body = openai_wire.encode_request(request)
    for _ in range(2):
        assert normalised(request, memoised) == normalised(request, plain)
        got, want = normalise("openai", body, memoised), normalise("openai", body, plain)
        assert json.dumps(got) == json.dumps(want)


def test_a_schema_past_the_byte_bound_is_not_kept_and_the_bound_holds() -> None:
    memo = SchemaMemo(max_bytes=200)
    big = {"type": "object", "description": "x" * 300}
    assert memo.canonical(big) == canonical_schema(big)
    assert memo.canonical(big) is not memo.canonical(big)  # never kept
    small = [{"type": "object", "description": f"{n}" * 30} for n in range(4)]
    kept = [memo.canonical(s) for s in small]  # 64 bytes each: 3 fit, the 4th starts afresh
    assert memo.canonical(small[3]) is kept[3] and memo.canonical(small[0]) is not kept[0]
    assert memo.canonical(small[0]) is memo.canonical(small[0])
