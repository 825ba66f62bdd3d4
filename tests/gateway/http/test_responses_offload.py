"""`POST /v1/responses` decodes a large body in a worker thread, as the chat doors do: the event
loop serves others while a tenant's hundred-thousand items are parsed and checked. Shown without
timing: a callback queued on the loop as the body's last byte arrives runs before the answer
starts (decoded on the loop, it ran only after). The real app, policies and settings."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from gateway.app import create_app
from gateway.settings import load_settings
from tests.gateway.http.raw_asgi import http_scope

KEY = "sk-resp-offload-000000000000000001"
ITEM = {"role": "user", "content": "spam spam spam"}
BAD = {"type": "message", "role": "robot", "content": "hi"}
CASES = {  # a body over `offload_body_bytes` that is refused while it is decoded
    "over max_messages": ([ITEM] * 20_000, "max_messages", "input"),
    "a bad last item": ([ITEM] * 9_999 + [BAD], "invalid_request", "input[9999].role"),
}


def _settings(tmp: Path) -> Any:
    (tmp / "policies").mkdir()
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    policy = {"tenant": "acme", "api_keys": [{"id": "k1", "sha256": digest}]}
    (tmp / "policies" / "acme.yaml").write_text(yaml.safe_dump(policy))
    backend = {"kind": "openai_compatible", "name": "none", "base_url": "http://127.0.0.1:9/v1"}
    config = {
        "database_url": f"sqlite:///{tmp}/lantern.db",
        "policy_dir": str(tmp / "policies"),
        "var_dir": str(tmp),
        "server_secret": "offload",
        "http": {"max_messages": 10_000},
        "fleet": {"signal_interval_s": 0, "health_interval_s": 3600},
        "models": [{"name": "gpt-4o-mini", "backends": [{**backend, "model": "gpt-4o-mini"}]}],
    }
    (tmp / "lantern.yaml").write_text(yaml.safe_dump(config))
    return load_settings(tmp / "lantern.yaml")


async def _order(tmp: Path, raw: bytes) -> tuple[list[str], dict[str, Any]]:
    """What happened after the body's last byte was handed over: the loop's turn, the
    answer's start (in that order when the body is decoded off the loop), and the answer."""
    settings = _settings(tmp)
    assert len(raw) >= settings.http.offload_body_bytes
    app = create_app(settings)
    parts = app.state.components
    await parts.start()
    seen: list[str] = []
    reply: dict[str, Any] = {}
    is_sent = False

    async def receive() -> dict[str, Any]:
        nonlocal is_sent
        if is_sent:
            await asyncio.Event().wait()  # the client stays; a disconnect never comes
        is_sent = True
        asyncio.get_running_loop().call_soon(seen.append, "loop turn")
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            seen.append("answer")
            reply["status"] = message["status"]
        elif message.get("body"):
            reply["body"] = orjson.loads(message["body"])

    scope = http_scope("POST", "/v1/responses", KEY, raw)
    try:
        await app(scope, receive, send)
        await asyncio.sleep(0)  # a callback still queued runs now
    finally:
        await parts.stop()
    return seen, reply


@pytest.mark.parametrize("case", list(CASES))
def test_a_large_body_is_decoded_off_the_loop(tmp_path: Path, case: str) -> None:
    items, code, param = CASES[case]
    raw = orjson.dumps({"model": "gpt-4o-mini", "input": items})
    seen, reply = asyncio.run(_order(tmp_path, raw))
    assert seen == ["loop turn", "answer"]
    assert reply["status"] == 400
    error = reply["body"]["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", code, param)
