"""Limits, disconnects, hot reload and fallback through a running gateway."""

from __future__ import annotations

import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from sqlalchemy import create_engine, text

from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.upstream import FakeUpstream

KEY = "lt-limits-key-000000000000000000000000001"


def _rows(gw: RunningGateway, expected: int, timeout_s: float = 10) -> list[dict[str, object]]:
    engine = create_engine(gw.settings.database_url)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            with engine.connect() as conn:
                result = conn.execute(text("SELECT * FROM usage ORDER BY ts, attempt"))
                rows = [dict(r._mapping) for r in result]
            if len(rows) >= expected or time.monotonic() > deadline:
                return rows
            time.sleep(0.1)
    finally:
        engine.dispose()


def _openai_model(name: str, fake: FakeUpstream, backend: str = "fake") -> dict[str, object]:
    return {
        "name": name,
        "backends": [
            {
                "kind": "openai_compatible",
                "name": backend,
                "base_url": fake.openai_base_url,
                "model": "gpt-4o-mini",
                "timeout_s": 2,
            }
        ],
    }


@pytest.fixture
def fake() -> FakeUpstream:
    with FakeUpstream() as up:
        yield up


def _gateway(
    tmp: Path, fake: FakeUpstream, limits: dict[str, object], **cfg: object
) -> RunningGateway:
    (tmp / "policies").mkdir(exist_ok=True)
    write_policy(tmp / "policies", "acme", KEY, limits=limits)
    models = cfg.pop("models", None) or [_openai_model("gpt-4o-mini", fake)]
    config = write_config(tmp / "lantern.yaml", tmp, models, **cfg)  # type: ignore[arg-type]
    return start_gateway(config)


def test_token_limit_429_in_both_formats(tmp_path: Path, fake: FakeUpstream) -> None:
    gw = _gateway(tmp_path, fake, {"tokens_per_minute": 300, "max_output_tokens": 100})
    try:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=KEY, max_retries=0)
        first = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", max_tokens=100, messages=[{"role": "user", "content": "a words:2"}]
        )
        assert first.headers["x-ratelimit-limit-tokens"] == "300"
        assert first.headers["x-lantern-cache"]
        with pytest.raises(openai.RateLimitError) as exc:
            for _ in range(5):  # 300 tokens admit at most a few 100-token reservations
                client.chat.completions.create(
                    model="gpt-4o-mini",
                    max_tokens=100,
                    messages=[{"role": "user", "content": "b words:95"}],
                )
        err = exc.value
        assert err.status_code == 429
        assert err.body["code"] == "tokens_per_minute"
        assert "300" in err.body["message"]
        assert int(err.response.headers["retry-after"]) >= 1
        assert err.response.headers["x-ratelimit-limit-tokens"] == "300"
        ant = anthropic.Anthropic(base_url=gw.url, api_key=KEY, max_retries=0)
        with pytest.raises(anthropic.RateLimitError) as aexc:
            ant.messages.create(
                model="gpt-4o-mini", max_tokens=100, messages=[{"role": "user", "content": "c"}]
            )
        assert aexc.value.body["type"] == "error"
        assert aexc.value.body["error"]["type"] == "rate_limit_error"
        assert "tokens_per_minute" in aexc.value.body["error"]["message"]
    finally:
        gw.stop()


def test_client_disconnect_mid_stream_is_recorded_and_released(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    fake.app.chunk_delay_s = 0.05
    gw = _gateway(tmp_path, fake, {"concurrent_requests": 1})
    try:
        body = {
            "model": "gpt-4o-mini",
            "stream": True,
            "max_tokens": 200,
            "messages": [{"role": "user", "content": "long words:120"}],
        }
        headers = {"authorization": f"Bearer {KEY}"}
        with (
            httpx.Client(timeout=10) as client,
            client.stream("POST", f"{gw.url}/v1/chat/completions", json=body, headers=headers) as r,
        ):
            assert r.status_code == 200
            lines = 0
            for line in r.iter_lines():
                lines += line.startswith("data: ")
                if lines == 6:
                    break  # leave mid-stream; closing the response drops the connection
        rows = _rows(gw, 1)
        assert [r["status"] for r in rows] == ["client_disconnect"]
        assert 0 < int(rows[0]["output_tokens"]) < 120
        # the concurrency slot came back: the next call is admitted
        fake.app.chunk_delay_s = 0.0
        ok = httpx.post(
            f"{gw.url}/v1/chat/completions",
            headers=headers,
            timeout=10,
            json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]},
        )
        assert ok.status_code == 200
    finally:
        gw.stop()


def test_hot_reload_under_traffic(tmp_path: Path, fake: FakeUpstream) -> None:
    gw = _gateway(tmp_path, fake, {"max_output_tokens": 50, "on_max_tokens_over": "reject"})
    headers = {"authorization": f"Bearer {KEY}"}
    body = {
        "model": "gpt-4o-mini",
        "max_tokens": 80,
        "messages": [{"role": "user", "content": "x"}],
    }
    policy = tmp_path / "policies" / "acme.yaml"
    try:
        assert (
            httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=headers).status_code
            == 400
        )
        write_policy(
            tmp_path / "policies",
            "acme",
            KEY,
            limits={"max_output_tokens": 100, "on_max_tokens_over": "reject"},
        )
        deadline = time.monotonic() + 2.0
        status = 400
        while status == 400 and time.monotonic() < deadline:  # traffic keeps flowing meanwhile
            status = httpx.post(
                f"{gw.url}/v1/chat/completions", json=body, headers=headers
            ).status_code
        assert status == 200
        policy.write_text(
            policy.read_text().replace("max_output_tokens: 100", "max_output_tokens: lots")
        )
        time.sleep(1.5)
        assert (
            httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=headers).status_code
            == 200
        )
        admin = httpx.get(
            f"{gw.url}/admin/policy", headers={"authorization": "Bearer admin-test-token"}
        ).json()
        assert [e["field"] for e in admin["errors"]] == ["limits.max_output_tokens"]
        assert admin["errors"][0]["line"] > 0
    finally:
        gw.stop()


def test_fallback_from_failing_replica_to_api_records_each_attempt_and_charges_once(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    with FakeUpstream() as second:
        models = [
            {
                "name": "gpt-4o-mini",
                "backends": [
                    {
                        "kind": "openai_compatible",
                        "name": "primary",
                        "base_url": fake.openai_base_url,
                        "model": "gpt-4o-mini",
                        "timeout_s": 2,
                    },
                    {
                        "kind": "anthropic",
                        "name": "secondary",
                        "base_url": second.base_url,
                        "model": "claude-sonnet-4-5",
                        "api_key_env": None,
                        "timeout_s": 2,
                    },
                ],
            }
        ]
        gw = _gateway(tmp_path, fake, {"tokens_per_minute": 100000}, models=models)
        try:
            fake.fail_next(status=503, count=5)
            client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=KEY, max_retries=0)
            reply = client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hi words:3"}]
            )
            assert reply.choices[0].message.content == "The quick brown"
            rows = _rows(gw, 2)
            assert [(r["backend"], r["status"], r["attempt"]) for r in rows] == [
                ("primary", "error", 0),
                ("secondary", "ok", 1),
            ]
            assert float(rows[0]["cost_usd"]) == 0.0
            assert float(rows[1]["cost_usd"]) > 0
            assert [r.path for r in second.requests] == ["/v1/messages"]
        finally:
            gw.stop()


def test_admin_breakeven_report_reproduces_the_note(tmp_path: Path, fake: FakeUpstream) -> None:
    """F2: u* = 12 $/h / (2.0 $/Mtok x 38.3 Mtok/h) = 0.16, from config and real ledger rows."""
    models = [
        {
            "name": "gpt-4o-mini",
            "backends": [
                {
                    "kind": "openai_compatible",
                    "name": "fleet",
                    "base_url": fake.openai_base_url,
                    "model": "gpt-4o-mini",
                    "price_per_hour_usd": 12,
                    "capacity_tok_s": 38.3e6 / 3600,
                }
            ],
        }
    ]
    gw = _gateway(
        tmp_path, fake, {}, models=models, prices={"gpt-4o-mini": {"input": 2.0, "output": 2.0}}
    )
    try:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=KEY, max_retries=0)
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "x words:4"}]
        )
        _rows(gw, 1)
        report = httpx.get(
            f"{gw.url}/admin/reports/breakeven",
            headers={"authorization": "Bearer admin-test-token"},
        ).json()
        [model] = report["models"]
        assert model["model"] == "gpt-4o-mini"
        assert round(model["u_star"], 2) == 0.16
        assert model["api_usd_per_mtok_blended"] == pytest.approx(2.0)
        assert "12" in model["formula"] and "38.3" in model["formula"]
        assert model["advice"] in ("scale_in", "stay", "scale_out")
    finally:
        gw.stop()
