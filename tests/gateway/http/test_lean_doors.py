"""The chat doors served before FastAPI's stack (`LanternApp`) against the reference path (the
same handler through FastAPI's middleware and router): the same status, headers and body for
successes, streams, rejections and paths that are not a door, with the real app, settings,
policy, ledger and the wire-level fake upstream."""

from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

from gateway.app import LanternApp, create_app
from gateway.settings import load_settings
from tests.fakes.upstream import FakeUpstream

KEY = "sk-doors-test-0000000000000000000001"
CHAT = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi there"}]}
CALLS: list[tuple[str, str, dict[str, str], bytes]] = [
    ("POST", "/v1/chat/completions", {}, orjson.dumps(CHAT)),
    ("POST", "/v1/chat/completions", {}, orjson.dumps({**CHAT, "stream": True})),
    (
        "POST",
        "/v1/chat/completions",
        {},
        orjson.dumps({**CHAT, "stream": True, "stream_options": {"include_usage": True}}),
    ),
    ("POST", "/v1/messages", {}, orjson.dumps(CHAT)),
    ("POST", "/v1/chat/completions", {"authorization": "Bearer sk-wrong"}, orjson.dumps(CHAT)),
    ("POST", "/v1/chat/completions", {}, b"{not json"),
    ("POST", "/v1/chat/completions", {}, orjson.dumps({**CHAT, "model": "nope"})),
    ("POST", "/v1/messages", {}, orjson.dumps({**CHAT, "max_tokens": 0})),
    ("GET", "/v1/chat/completions", {}, b""),
    ("POST", "/v1/chat/completions/", {}, orjson.dumps(CHAT)),
    ("GET", "/healthz", {}, b""),
]
VARYING = re.compile(rb'"(id|created)":("[^"]*"|\d+)')


def settings(tmp: Path, upstream: FakeUpstream) -> Any:
    (tmp / "policies").mkdir()
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    policy = {"tenant": "acme", "api_keys": [{"id": "k1", "sha256": digest}]}
    (tmp / "policies" / "acme.yaml").write_text(yaml.safe_dump(policy))
    backend = {
        "kind": "openai_compatible",
        "name": "fake",
        "base_url": upstream.openai_base_url,
        "model": "gpt-4o-mini",
    }
    config = {
        "database_url": f"sqlite:///{tmp}/lantern.db",
        "policy_dir": str(tmp / "policies"),
        "var_dir": str(tmp),
        "server_secret": "doors",
        "fleet": {"signal_interval_s": 0},
        "models": [{"name": "m", "backends": [backend]}],
    }
    (tmp / "lantern.yaml").write_text(yaml.safe_dump(config))
    return load_settings(tmp / "lantern.yaml")


async def replies(tmp: Path, lean: bool) -> list[tuple[int, list[tuple[str, str]], bytes]]:
    with FakeUpstream() as upstream:  # its own: reply ids count from 1 for each app
        app = create_app(settings(tmp, upstream))
        assert isinstance(app, LanternApp) and app.chat_routes is not None
        if not lean:  # the reference path: FastAPI's stack and router
            app.chat_routes = None
        parts = app.state.components
        await parts.start()
        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                out = []
                for method, path, headers, body in CALLS:
                    sent = {"authorization": f"Bearer {KEY}", **headers}
                    r = await client.request(method, path, headers=sent, content=body)
                    kept = [
                        (k, v)
                        for k, v in r.headers.items()
                        if k not in ("x-lantern-request-id", "content-length")
                    ]
                    out.append((r.status_code, kept, VARYING.sub(rb'"\1":0', r.content)))
                await asyncio.sleep(0.05)  # the after-reply batch
                return out
        finally:
            parts.pipeline.after_reply.flush()
            await parts.stop()


def test_lean_doors_answer_as_the_reference_path(tmp_path: Path) -> None:
    (tmp_path / "lean").mkdir()
    (tmp_path / "ref").mkdir()
    lean = asyncio.run(replies(tmp_path / "lean", True))
    ref = asyncio.run(replies(tmp_path / "ref", False))
    assert [status for status, _, _ in lean] == [
        200,
        200,
        200,
        200,
        401,
        400,
        404,
        400,
        405,
        307,
        200,
    ]
    for (method, path, _, _), got, want in zip(CALLS, lean, ref, strict=True):
        assert got == want, f"{method} {path}"
    assert b'"usage":{"prompt_tokens"' in lean[2][2]  # the stream asked for usage and got it
