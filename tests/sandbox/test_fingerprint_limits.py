from __future__ import annotations

import pytest

from sandbox.errors import IdempotencyKeyInvalid, InvalidToolRequest
from sandbox.fingerprint import client_token, derive_key, fingerprint, parse_idempotency_key
from sandbox.limits import fill_command, resolve_limits, rlimit_spec
from sandbox.types import ToolLimits


def test_key_accepts_tokens_and_sf_strings() -> None:
    assert parse_idempotency_key("8e03978e-40d5") == "8e03978e-40d5"
    assert parse_idempotency_key('"8e03978e-40d5"') == "8e03978e-40d5"
    assert parse_idempotency_key('"a\\"b"') == 'a"b'
    assert parse_idempotency_key("Key") != parse_idempotency_key("key")


@pytest.mark.parametrize(
    "header", [None, "", "   ", "x" * 256, "a b", "bad\x01", "é", '"unterminated', '"bad\\n"']
)
def test_key_rejects_malformed(header: str | None) -> None:
    with pytest.raises(IdempotencyKeyInvalid):
        parse_idempotency_key(header)


def test_key_of_255_chars_is_accepted() -> None:
    assert parse_idempotency_key("k" * 255) == "k" * 255


def test_derived_key_is_stable_and_scoped() -> None:
    assert derive_key("s1", "call_1") == derive_key("s1", "call_1")
    assert derive_key("s1", "call_1") != derive_key("s2", "call_1")
    assert len(derive_key("s1", "call_1")) == len("derived-") + 48


def test_fingerprint_ignores_key_order_only() -> None:
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    assert fingerprint({"a": 1, "b": [1, 2]}) != fingerprint({"a": 1, "b": [2, 1]})


def test_client_token_fits_ecs() -> None:
    token = client_token("acme", "key-1")
    assert len(token) == 52
    assert all(33 <= ord(c) <= 126 for c in token)
    assert token == client_token("acme", "key-1") != client_token("other", "key-1")


def test_fill_command_never_splits_or_interprets() -> None:
    argv = fill_command(
        ("python3", "-c", "{code}", "--n={n}", "{{literal}}"),
        {"code": "print(1); import os", "n": "$(id)"},
    )
    assert argv == ("python3", "-c", "print(1); import os", "--n=$(id)", "{literal}")


@pytest.mark.parametrize(
    ("arguments", "param"),
    [
        ({}, "arguments.code"),
        ({"code": "x", "extra": "y"}, "arguments.extra"),
        ({"code": "a\x00b"}, "arguments.code"),
    ],
)
def test_fill_command_rejects(arguments: dict[str, str], param: str) -> None:
    with pytest.raises(InvalidToolRequest) as caught:
        fill_command(("python3", "-c", "{code}"), arguments)
    assert caught.value.param == param


def test_limits_within_policy() -> None:
    policy = ToolLimits(wall_s=30, memory_mb=256, cpu_s=10, output_kb=64)
    assert resolve_limits(policy, None) == policy
    smaller = ToolLimits(wall_s=5, memory_mb=128, cpu_s=2, output_kb=8)
    assert resolve_limits(policy, smaller) == smaller
    with pytest.raises(InvalidToolRequest) as caught:
        resolve_limits(policy, ToolLimits(wall_s=31, memory_mb=128, cpu_s=2, output_kb=8))
    assert caught.value.param == "limits.wall_s"


def test_rlimits_in_bytes_and_seconds() -> None:
    spec = rlimit_spec(ToolLimits(memory_mb=128, cpu_s=2.5, max_procs=16, file_mb=1))
    assert spec == {
        "RLIMIT_AS": 128 << 20,
        "RLIMIT_CPU": 3,
        "RLIMIT_NPROC": 16,
        "RLIMIT_FSIZE": 1 << 20,
        "RLIMIT_NOFILE": 256,
        "RLIMIT_CORE": 0,
    }
