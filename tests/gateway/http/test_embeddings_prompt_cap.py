"""`/v1/embeddings` holds the tenant's `max_prompt_tokens` on the count it reserves (a list's
total): over the cap, a 400 in OpenAI's shape naming the rule and `input`, before anything is
reserved, forwarded or recorded; at the cap, served. The real app, policies, quota store and
ledger, with the wire-level embeddings fake upstream."""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from sqlalchemy import create_engine, text

from adapters.tokens import TokenCounter
from gateway.app import create_app
from gateway.core.admission import limits_from_policy
from gateway.settings import load_settings
from policies.limits import LimitsPolicy
from quotas.store import UsageSnapshot
from tests.fakes.embeddings import FakeEmbeddings

MODEL = "text-embedding-3-small"
CAP = 8
CAPPED = LimitsPolicy(max_prompt_tokens=CAP, tokens_per_minute=100, requests_per_minute=10)
KEYS = {"capped": "sk-embed-cap-0000000000000000000001", "open": "sk-embed-open-00000000000000001"}
OVER = ["one two three four five", "six seven eight nine"]  # 5 + 4: each alone fits, not both
AT_CAP = ["one two three four", "five six seven eight"]  # 4 + 4


def _settings(tmp: Path, upstream: FakeEmbeddings) -> Any:
    (tmp / "policies").mkdir()
    limits = {"capped": CAPPED.model_dump(exclude_defaults=True), "open": {}}
    for tenant, key in KEYS.items():
        digest = hashlib.sha256(key.encode()).hexdigest()
        policy: dict[str, Any] = {"tenant": tenant, "api_keys": [{"id": "k1", "sha256": digest}]}
        if limits[tenant]:
            policy["limits"] = limits[tenant]
        (tmp / "policies" / f"{tenant}.yaml").write_text(yaml.safe_dump(policy))
    backend = {"kind": "openai_compatible", "name": "fake-embed", "base_url": upstream.base_url}
    config = {
        "database_url": f"sqlite:///{tmp}/lantern.db",
        "policy_dir": str(tmp / "policies"),
        "var_dir": str(tmp),
        "server_secret": "embed-cap",
        "fleet": {"signal_interval_s": 0},
        "models": [{"name": MODEL, "backends": [{**backend, "model": "te3"}]}],
        "prices": {MODEL: {"input": 0.02, "output": 0.0}},
    }
    (tmp / "lantern.yaml").write_text(yaml.safe_dump(config))
    return load_settings(tmp / "lantern.yaml")


async def _calls(tmp: Path) -> dict[str, Any]:
    """Each call's status and body, the capped tenant's quota use after the refused call and
    after the served one, and what reached the upstream."""
    with FakeEmbeddings() as upstream:
        app = create_app(_settings(tmp, upstream))
        parts = app.state.components
        await parts.start()
        store = parts.pipeline.s.admission.store
        limits = limits_from_policy(CAPPED)

        async def use() -> UsageSnapshot:
            snapshot: UsageSnapshot = await store.usage(
                "capped", limits, now_ms=int(time.time() * 1000)
            )
            return snapshot

        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:

                async def embed(tenant: str, texts: list[str]) -> tuple[int, Any]:
                    reply = await client.post(
                        "/v1/embeddings",
                        json={"model": MODEL, "input": texts},
                        headers={"authorization": f"Bearer {KEYS[tenant]}"},
                    )
                    return reply.status_code, reply.json()

                out: dict[str, Any] = {"refused": await embed("capped", OVER)}
                out["use_after_refused"] = await use()
                out["forwarded_after_refused"] = _embeddings(upstream)
                out["open"] = await embed("open", OVER)
                out["at_cap"] = await embed("capped", AT_CAP)
                out["use_after_served"] = await use()
                out["forwarded"] = _embeddings(upstream)
                return out
        finally:
            parts.pipeline.after_reply.flush()
            await parts.stop()  # the recorder writes what it holds before it closes


def _embeddings(upstream: FakeEmbeddings) -> list[Any]:
    """The inputs of the embeddings calls the upstream saw (its health probes left out)."""
    return [r.json()["input"] for r in upstream.app.requests if r.path == "/v1/embeddings"]


def _ledger(tmp: Path) -> list[tuple[str, str, int, str]]:
    engine = create_engine(f"sqlite:///{tmp}/lantern.db")
    query = text("SELECT tenant, status, input_tokens, door FROM usage ORDER BY ts")
    with engine.connect() as conn:
        rows = [(r[0], r[1], r[2], r[3]) for r in conn.execute(query)]
    engine.dispose()
    return rows


def test_embeddings_hold_the_tenants_max_prompt_tokens(tmp_path: Path) -> None:
    counter = TokenCounter()
    assert [counter.count_text(MODEL, t) for t in OVER + AT_CAP] == [5, 4, 4, 4]
    out = asyncio.run(_calls(tmp_path))
    assert out["refused"] == (
        400,
        {
            "error": {
                "message": "prompt has 9 tokens; tenant limit max_prompt_tokens is 8",
                "type": "invalid_request_error",
                "param": "input",
                "code": "max_prompt_tokens",
            }
        },
    )
    refused = out["use_after_refused"]
    assert (refused.tokens_used, refused.requests_used, refused.concurrent) == (0, 0, 0)
    assert (refused.spend_micro_usd, refused.held_micro_usd) == (0, 0)
    assert out["forwarded_after_refused"] == []
    status, body = out["open"]  # no cap: the same input is served
    assert (status, body["usage"]["prompt_tokens"], len(body["data"])) == (200, 9, 2)
    status, body = out["at_cap"]
    assert (status, body["usage"]["prompt_tokens"], len(body["data"])) == (200, 8, 2)
    served = out["use_after_served"]  # the one call served, settled on the tokens billed
    assert (served.tokens_used, served.requests_used, served.concurrent) == (8, 1, 0)
    assert served.held_micro_usd == 0
    assert out["forwarded"] == [OVER, AT_CAP]
    assert _ledger(tmp_path) == [
        ("open", "ok", 9, "embeddings"),
        ("capped", "ok", 8, "embeddings"),
    ]
