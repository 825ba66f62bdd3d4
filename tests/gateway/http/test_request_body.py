"""Bounded body reading and parsing: the byte limit (declared or counted), JSON syntax, and
the nesting-depth limit with the path where it is passed."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from starlette.requests import Request

from adapters.errors import WireFormatError
from gateway.errors import BodyTooLarge, ClientGone, RequestRejected
from gateway.http.request_body import exceeds_depth, parse_object, read_body, too_deep_path


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
