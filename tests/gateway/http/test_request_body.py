"""Bounded body reading and parsing: the byte limit (declared or counted), JSON syntax, and
the nesting-depth limit with the path where it is passed."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from starlette.requests import Request

from adapters.errors import WireFormatError
from adapters.wire.openai import ToolListMemo, decode_tools
from gateway.errors import BodyTooLarge, ClientGone, RequestRejected
from gateway.http.request_body import (
    exceeds_depth,
    first_headers,
    parse_object,
    read_body,
    too_deep_path,
)


def nested(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize(("levels", "too_deep"), [(1, False), (64, False), (65, True)])
def test_depth_counts_every_container(levels: int, too_deep: bool) -> None:
    assert exceeds_depth(nested(levels), 64) is too_deep
    listed: Any = []
    for _ in range(levels - 1):
        listed = [listed]
    assert exceeds_depth(listed, 64) is too_deep


def _refused(raw: bytes, max_depth: int) -> bool:
    try:
        parse_object(raw, max_depth)
    except RequestRejected:
        return True
    return False


@pytest.mark.parametrize("levels", [1, 2, 7, 8, 9, 30])
@pytest.mark.parametrize("padding", [b"", b'"{{{{{{{{{{"', b'"[[[[[[[[[["', b"[{},[],{}]"])
def test_parse_refuses_exactly_what_the_walk_finds_too_deep(levels: int, padding: bytes) -> None:
    """The bracket count only skips the walk where it cannot find a level too many: brackets
    inside strings and sibling containers raise the count, never the verdict (the reference
    is `exceeds_depth` on every parsed body)."""
    for max_depth in (8, 9):
        inner = b'{"a":' * (levels - 1) + b"{}" + b"}" * (levels - 1)
        raw = b'{"pad":' + (padding or b"0") + b',"deep":' + inner + b"}"
        assert _refused(raw, max_depth) is exceeds_depth(orjson.loads(raw), max_depth)


def _outcome(raw: bytes, max_depth: int, memo: ToolListMemo | None) -> Any:
    try:
        return parse_object(raw, max_depth, None if memo is None else memo.depth)
    except RequestRejected as exc:
        return (exc.rule, exc.field, str(exc))


def _deep(levels: int, kind: str) -> bytes:
    open_, close = (b'{"a":', b"}") if kind == "object" else (b"[", b"]")
    return open_ * (levels - 1) + (b"{}" if kind == "object" else b"[]") + close * (levels - 1)


@pytest.mark.parametrize("tools_levels", [0, 1, 5, 6, 7, 8, 20, 300])
@pytest.mark.parametrize("other_levels", [0, 1, 5, 6, 7, 8])
@pytest.mark.parametrize("kind", ["object", "array"])
def test_remembered_tool_depths_refuse_exactly_what_the_walk_refuses(
    tools_levels: int, other_levels: int, kind: str
) -> None:
    """With the tool lists' depths remembered (the chat door's memo), the same bodies pass and
    the same ones are refused, with the same rule, path and message, whether the depth is new
    to the memo or remembered, and where the tools are too deep, the rest, or both."""
    memo = ToolListMemo()
    for max_depth in (1, 2, 6, 7, 8):
        tools = b'"tools":[' + (_deep(tools_levels, kind) if tools_levels else b"") + b"],"
        other = _deep(other_levels, kind) if other_levels else b"1"
        for raw in (
            b'{"model":"m",' + tools + b'"messages":[{"content":' + other + b"}]}",
            b'{"messages":' + other + b"," + tools[:-1] + b"}",
            b'{"tools":7,"x":' + other + b"}",
        ):
            expected = _outcome(raw, max_depth, None)
            assert _outcome(raw, max_depth, memo) == expected  # new to the memo
            assert _outcome(raw, max_depth, memo) == expected  # remembered


def test_a_tool_list_decoded_after_its_depth_is_the_plain_decode() -> None:
    memo = ToolListMemo(max_entries=2)
    tools = [
        {"type": "function", "function": {"name": f"t{i}", "parameters": {}}} for i in range(3)
    ]
    for tool in tools:
        body = parse_object(orjson.dumps({"tools": [tool]}), 64, memo.depth)
        assert memo.decode(body["tools"]) == decode_tools([tool])
        assert memo.decode([tool]) == decode_tools([tool])  # another object: its own bytes
        assert len(memo) <= 2
    assert memo.depth([]) == 1 and memo.depth([[{"a": [1]}]]) == 4


def test_parse_names_the_deep_path_and_the_rule() -> None:
    raw = b'{"model":"m","tools":[{"x":' + b"[" * 70 + b"]" * 70 + b"}]}"
    with pytest.raises(RequestRejected) as caught:
        parse_object(raw, 64)
    assert (caught.value.rule, caught.value.field) == ("max_json_depth", "tools[0].x[0][0][0]")
    assert too_deep_path({"a": 1}, 64) == "body"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [(b"{nope", "not valid JSON"), (b"[1]", "must be a JSON object"), (b"NaN", "not valid JSON")],
)
def test_parse_refuses_what_is_not_a_json_object(raw: bytes, reason: str) -> None:
    with pytest.raises(WireFormatError) as caught:
        parse_object(raw, 64)
    assert caught.value.field == "body" and caught.value.reason.startswith(reason)


def request(chunks: list[bytes], headers: dict[str, str], gone: bool = False) -> Request:
    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    if gone:
        messages[-1]["more_body"] = True
        messages.append({"type": "http.disconnect"})
    pending = iter(messages)

    async def receive() -> dict[str, Any]:
        return next(pending)

    raw_headers = [(k.encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "POST", "headers": raw_headers}, receive)


def test_declared_length_over_the_limit_is_refused_before_reading() -> None:
    untouched = request([], {"content-length": "11"})  # receive() would raise: nothing queued
    with pytest.raises(BodyTooLarge):
        asyncio.run(read_body(untouched, 10))


def test_counted_bytes_over_the_limit_are_refused() -> None:
    chunked = request([b"12345", b"67890", b"x"], {"transfer-encoding": "chunked"})
    with pytest.raises(BodyTooLarge):
        asyncio.run(read_body(chunked, 10))
    exact = request([b"12345", b"67890"], {"transfer-encoding": "chunked"})
    assert asyncio.run(read_body(exact, 10)) == b"1234567890"


def test_a_client_gone_mid_body_is_client_gone() -> None:
    with pytest.raises(ClientGone):
        asyncio.run(read_body(request([b"12"], {}, gone=True), 10))


def test_a_body_read_again_follows_starlettes_rules() -> None:
    """The first read takes the messages; a read after `Request.body()` gets the body kept."""
    first = request([b"12", b"", b"345"], {})
    assert asyncio.run(read_body(first, 10)) == b"12345"
    with pytest.raises(RuntimeError, match="Stream consumed"):
        asyncio.run(read_body(first, 10))
    kept = request([b"123", b"45"], {"content-length": "5"})
    assert asyncio.run(kept.body()) == b"12345"
    assert asyncio.run(read_body(kept, 10)) == b"12345"
    with pytest.raises(BodyTooLarge):
        asyncio.run(read_body(request([b"123", b"45"], {}), 4))
    assert asyncio.run(read_body(request([b""], {}), 4)) == b""


def test_first_headers_read_as_starlettes_headers_do() -> None:
    headers = [
        (b"authorization", b"Bearer one"),
        (b"x-session-id", b"s\xe9"),
        (b"authorization", b"Bearer two"),
        (b"x-empty", b""),
    ]
    http = Request({"type": "http", "method": "POST", "headers": headers})
    read = first_headers(http)
    for name in ("authorization", "x-session-id", "x-empty", "x-absent", "Authorization"):
        assert read.get(name.lower()) == http.headers.get(name)
    assert read == {"authorization": "Bearer one", "x-session-id": "sé", "x-empty": ""}
