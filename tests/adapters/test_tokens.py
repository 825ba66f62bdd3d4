"""Token counting: exact counts on fixed strings and requests, offline encodings."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

import adapters.tokens as tokens_module
from adapters.tokens import TokenCounter, bundled_tiktoken_dir, encoding_name_for
from adapters.wire import openai as openai_wire

BODY = {
    "model": "gpt-4o-mini",
    "messages": [
        {"role": "system", "content": "be nice"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q":"x"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "found it"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "search",
                "description": "Search",
                "parameters": {"type": "object"},
            },
        }
    ],
}


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("gpt-4o-mini", "o200k_base"),
        ("openai/o3-mini", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("claude-sonnet-4-5", "cl100k_base"),
    ],
)
def test_encoding_choice(model: str, name: str) -> None:
    assert encoding_name_for(model) == name


def test_exact_text_counts() -> None:
    counter = TokenCounter()
    assert counter.count_text("gpt-4o", "The quick brown fox jumps over the lazy dog") == 9
    assert counter.count_text("gpt-4o", "hello world") == 2
    assert counter.count_text("gpt-4o", "日本語のテキストを数える") == 9
    assert counter.count_text("gpt-4", "日本語のテキストを数える") == 12
    assert counter.encoding("gpt-4o") is counter.encoding("o1")  # loaded once


def test_request_count_follows_the_per_message_rule() -> None:
    counter = TokenCounter()
    req = openai_wire.decode_request(BODY)
    tools_json = orjson.dumps(
        [{"name": "search", "description": "Search", "parameters": {"type": "object"}}]
    ).decode()
    assert counter.count_text("gpt-4o-mini", tools_json) == 17
    # priming 3 + system (3+1+2) + user (3+1+1) + assistant (3+1+1+5) + tool (3+1+2) + tools 17
    assert counter.count_request(req) == 47
    assert counter.count_request(req) == 47  # role and name counts now memoised: the same
    # the memo keys names by encoding too: a cl100k count on the same counter is a fresh one's
    cl100k = openai_wire.decode_request({**BODY, "model": "gpt-4"})
    assert counter.count_request(cl100k) == TokenCounter().count_request(cl100k)


def test_bundled_files_work_without_a_cache_dir_set() -> None:
    folder = bundled_tiktoken_dir()
    assert folder is not None
    # sha1 of the download URLs of cl100k_base and o200k_base
    assert (folder / "9b5ad71b2ce5302211f9c61530b329a4922fc6a4").is_file()
    assert (folder / "fb374d419588a4632f3f557e76b4b70aebbca790").is_file()
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    script = (
        "import os; from adapters.tokens import TokenCounter; "
        "print(TokenCounter().count_text('gpt-4o', 'hello world'), "
        "os.environ['TIKTOKEN_CACHE_DIR'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert out.stdout.split() == ["2", str(folder)]


def test_tool_list_counts_are_memoised_by_content() -> None:
    counter = TokenCounter()
    first = openai_wire.decode_request(BODY)
    assert counter.count_request(first) == 47
    # a fresh decode of the same body (new objects, equal JSON) hits the memo: the same count
    assert counter.count_request(openai_wire.decode_request(BODY)) == 47
    # a changed schema is another entry, counted afresh
    changed = orjson.loads(orjson.dumps(BODY))
    changed["tools"][0]["function"]["parameters"] = {
        "type": "object",
        "properties": {"q": {"type": "string", "description": "what to look for"}},
    }
    req = openai_wire.decode_request(changed)
    tools_json = orjson.dumps(
        [
            {
                "name": "search",
                "description": "Search",
                "parameters": changed["tools"][0]["function"]["parameters"],
            }
        ]
    ).decode()
    assert counter.count_request(req) == 47 - 17 + counter.count_text("gpt-4o-mini", tools_json)
    assert counter.count_request(req) == TokenCounter().count_request(req)
    # the same tools under another encoding are not the o200k entry
    cl100k = openai_wire.decode_request({**changed, "model": "gpt-4"})
    assert counter.count_request(cl100k) == TokenCounter().count_request(cl100k)


def test_a_tool_tuple_counted_before_is_found_by_identity_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The memo's tuple (the same object call after call) is counted once; the same tuple
    under another encoding, or an equal tuple, is not taken for it; the table stays bounded."""
    memo = openai_wire.ToolListMemo()
    counter = TokenCounter()
    first = openai_wire.decode_request(BODY, memo)
    again = openai_wire.decode_request(orjson.loads(orjson.dumps(BODY)), memo)
    assert again.tools is first.tools
    assert counter.count_request(first) == 47
    monkeypatch.setattr(orjson, "dumps", None)  # found by identity: nothing is serialised
    assert counter.count_request(again) == 47
    monkeypatch.undo()
    cl100k = openai_wire.decode_request({**BODY, "model": "gpt-4"}, memo)
    assert cl100k.tools is first.tools
    assert counter.count_request(cl100k) == TokenCounter().count_request(cl100k)
    fresh = openai_wire.decode_request(BODY)  # equal tools, another tuple: counted by content
    assert fresh.tools is not first.tools and counter.count_request(fresh) == 47
    monkeypatch.setattr(tokens_module, "MAX_TOOL_TUPLES", 2)
    for _ in range(5):
        assert counter.count_request(openai_wire.decode_request(BODY)) == 47
        assert len(counter._tool_tuples) <= 2
