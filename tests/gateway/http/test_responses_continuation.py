"""A `previous_response_id` continuation: the refusals that need no stored conversation (the
client's identifiers, the tenant's model and output cap) come before it is read, and a long one
is read off the event loop. Shown without timing, as test_responses_offload shows it for
bodies: a callback queued on the loop as the store hands the conversation over runs before the
answer starts (read on the loop, it ran only after). The real app, policies and settings."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from adapters.types import ChatRequest
from gateway.app import create_app
from gateway.core.measure_lane import MeasureLane
from gateway.core.token_count import TiktokenCounting
from gateway.responses.store import PutOutcome, ResponseStore, StoredResponse
from gateway.settings import load_settings
from gateway.wiring import build_components
from tests.gateway.http.raw_asgi import http_scope

KEY = "sk-resp-continue-00000000000000001"
ITEM = {"type": "message", "role": "user", "content": "spam spam spam"}
OUTPUT = {
    "type": "message",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "ok"}],
}
STORED_ID = "resp_long"
MAX_ITEMS = 10_000
# a conversation one item short of MAX_ITEMS, well over `offload_body_bytes` (256 KiB)
LONG = StoredResponse(
    (*[ITEM] * (MAX_ITEMS - 2), OUTPUT), {"id": STORED_ID, "object": "response", "output": [OUTPUT]}
)


class WatchedStore:
    """The process's store; each read of a conversation is counted, and queues a callback on
    the loop as its bytes are handed over."""

    def __init__(self, inner: ResponseStore, seen: list[str]) -> None:
        self.inner = inner
        self.seen = seen
        self.reads: list[str] = []

    def _handed_over(self, response_id: str) -> None:
        self.reads.append(response_id)
        asyncio.get_running_loop().call_soon(self.seen.append, "loop turn")

    async def put(self, tenant: str, response_id: str, data: bytes) -> PutOutcome:
        return await self.inner.put(tenant, response_id, data)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        found = await self.inner.get(tenant, response_id)
        self._handed_over(response_id)
        return found

    async def get_bytes(self, tenant: str, response_id: str) -> bytes | None:
        data = await self.inner.get_bytes(tenant, response_id)
        self._handed_over(response_id)
        return data

    async def get_reply(self, tenant: str, response_id: str) -> bytes | None:
        return await self.inner.get_reply(tenant, response_id)

    async def delete(self, tenant: str, response_id: str) -> bool:
        return await self.inner.delete(tenant, response_id)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _settings(tmp: Path) -> Any:
    (tmp / "policies").mkdir()
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    policy = {
        "tenant": "acme",
        "api_keys": [{"id": "k1", "sha256": digest}],
        "models": ["gpt-4o-mini"],
        "limits": {
            "max_output_tokens": 1000,
            "on_max_tokens_over": "reject",
            "tokens_per_minute": 500,
            "max_prompt_tokens": 1000,
        },
    }
    (tmp / "policies" / "acme.yaml").write_text(yaml.safe_dump(policy))
    backend = {"kind": "openai_compatible", "base_url": "http://127.0.0.1:9/v1"}
    config = {
        "database_url": f"sqlite:///{tmp}/lantern.db",
        "policy_dir": str(tmp / "policies"),
        "var_dir": str(tmp),
        "server_secret": "continue",
        "http": {"max_messages": MAX_ITEMS},
        "fleet": {"signal_interval_s": 0, "health_interval_s": 3600},
        "models": [
            {"name": name, "backends": [{**backend, "name": f"none-{name}", "model": name}]}
            for name in ("gpt-4o-mini", "gpt-4o")
        ],
    }
    (tmp / "lantern.yaml").write_text(yaml.safe_dump(config))
    return load_settings(tmp / "lantern.yaml")


class ThreadRecordingCounter(TiktokenCounting):
    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def count_prompt(self, request: ChatRequest, scope: str = "") -> int:
        self.threads.append(threading.get_ident())
        return super().count_prompt(request, scope)


async def _continue(
    tmp: Path, body: dict[str, Any], counter: ThreadRecordingCounter | None = None
) -> tuple[list[str], dict[str, Any], list[str]]:
    """What happened once the stored conversation was handed over (the loop's turn, the
    answer's start), the answer, and the conversations read; `counter`: the large-call lane's
    (the pipeline's own counter on the loop)."""
    settings = _settings(tmp)
    parts = build_components(settings)
    lane = parts.pipeline.s.measure_lane
    if counter is not None and lane is not None:
        recording = MeasureLane(lane.prompts, counter, lane.min_body_bytes)
        parts.pipeline.s = dataclasses.replace(parts.pipeline.s, measure_lane=recording)
    seen: list[str] = []
    store = WatchedStore(parts.response_store, seen)
    parts.response_store = store
    app = create_app(settings, parts)
    await parts.start()
    await store.inner.put("acme", STORED_ID, LONG.to_bytes())
    raw = orjson.dumps({"previous_response_id": STORED_ID, **body})
    reply: dict[str, Any] = {}
    is_sent = False

    async def receive() -> dict[str, Any]:
        nonlocal is_sent
        if is_sent:
            await asyncio.Event().wait()  # the client stays; a disconnect never comes
        is_sent = True
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
    return seen, reply, store.reads


def _error(reply: dict[str, Any]) -> tuple[int, str, str, str]:
    error = reply["body"]["error"]
    return reply["status"], error["type"], error["code"], error["param"]


def test_a_long_stored_conversation_is_read_off_the_loop(tmp_path: Path) -> None:
    """The conversation and this input pass `max_messages` together: refused once the stored
    items are counted, which is done in a worker thread, the loop free meanwhile."""
    body = {"model": "gpt-4o-mini", "input": [ITEM, ITEM, ITEM], "max_output_tokens": 50}
    seen, reply, reads = asyncio.run(_continue(tmp_path, body))
    assert reads == [STORED_ID]
    assert seen == ["loop turn", "answer"]
    assert _error(reply) == (400, "invalid_request_error", "max_messages", "input")


def test_a_long_continuation_is_counted_in_the_large_call_lane(tmp_path: Path) -> None:
    """A small body continuing a long conversation is a large call: its prompt is prepared
    and counted in the lane's worker thread (refused here by the tenant's prompt cap once
    counted), never on the loop."""
    counter = ThreadRecordingCounter()
    body = {"model": "gpt-4o-mini", "input": [ITEM], "max_output_tokens": 50}
    _, reply, reads = asyncio.run(_continue(tmp_path, body, counter))
    assert reads == [STORED_ID]
    status, kind, code, param = _error(reply)
    assert (status, kind, code, param) == (
        400,
        "invalid_request_error",
        "max_prompt_tokens",
        "input",
    )
    assert len(counter.threads) == 1 and threading.get_ident() not in counter.threads


REFUSED: dict[str, tuple[dict[str, Any], int, str, str | None]] = {  # body, status, code, param
    "a model the tenant may not use": ({"model": "gpt-4o"}, 403, "models", "model"),
    "a model nobody serves": ({"model": "gpt-9"}, 404, "model_not_found", "model"),
    "output over the tenant's cap": (
        {"max_output_tokens": 1001},
        400,
        "max_output_tokens",
        "max_output_tokens",
    ),
    "output alone over tokens_per_minute": (
        {"max_output_tokens": 501},
        400,
        "tokens_per_minute",
        None,
    ),
    "an unusable safety_identifier": (
        {"safety_identifier": "end\nuser"},
        400,
        "identifier",
        "safety_identifier",
    ),
    "an unusable prompt_cache_key": (
        {"prompt_cache_key": "k" * 257},
        400,
        "identifier",
        "prompt_cache_key",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_refusal_that_needs_no_conversation_never_reads_it(tmp_path: Path, case: str) -> None:
    extra, status, code, param = REFUSED[case]
    body = {"model": "gpt-4o-mini", "input": "more", "max_output_tokens": 50, **extra}
    _, reply, reads = asyncio.run(_continue(tmp_path, body))
    assert reads == []
    error = reply["body"]["error"]
    assert (reply["status"], error["code"], error["param"]) == (status, code, param)
