"""Server-side web searches are the tenant's to pay: an Anthropic upstream that ran a search
(tests/fakes/today.py reports `server_tool_use.web_search_requests: 1`) costs the call its
tokens and a cent a search, in the ledger and in the tenant's dollar budget."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.e2e.test_front_doors import _ledger_rows
from tests.fakes import today
from tests.fakes.upstream import FakeUpstream

KEY = "lt-search-key-0001"
MODEL = "claude-sonnet-4-5"
# the fake's usage at $3 / $15 per Mtok, reads 0.3, 5 min writes 3.75, 1 h writes 6
TOKENS_USD = (12 * 3 + 5120 * 0.3 + 110 * 3.75 + 200 * 6 + 41 * 15) / 1e6
SEARCH_USD = 0.01  # Anthropic's $10 per 1,000 searches


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[RunningGateway]:
    (tmp_path / "policies").mkdir()
    # one call's tokens fit the budget twice over; its search does not
    write_policy(tmp_path / "policies", "acme", KEY, limits={"monthly_budget_usd": 0.01})
    with FakeUpstream() as fake:
        fake.app.today = True
        backend = {"kind": "anthropic", "name": "claude", "base_url": fake.base_url}
        backend |= {"model": today.UPSTREAM_MODEL["anthropic"], "api_key_env": None}
        models = [{"name": MODEL, "backends": [backend]}]
        prices = {MODEL: {"input": 3.0, "output": 15.0}}
        running = start_gateway(
            write_config(tmp_path / "lantern.yaml", tmp_path, models, prices=prices)
        )
        try:
            yield running
        finally:
            running.stop()


def _ask(gw: RunningGateway, stream: bool) -> httpx.Response:
    body = {
        "model": MODEL,
        "max_tokens": 100,
        "stream": stream,
        "messages": [{"role": "user", "content": "news?"}],
    }
    return httpx.post(f"{gw.url}/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=10)


@pytest.mark.parametrize("stream", [False, True])
def test_a_search_is_charged_to_the_ledger_and_the_budget(
    gateway: RunningGateway, stream: bool
) -> None:
    reply = _ask(gateway, stream)
    assert reply.status_code == 200, reply.text
    assert b'"server_tool_use":{"web_search_requests":1}' in reply.content  # relayed as sent
    (row,) = _ledger_rows(gateway, 1)
    assert row["cost_usd"] == pytest.approx(TOKENS_USD + SEARCH_USD)
    assert TOKENS_USD * 2 < 0.01 < TOKENS_USD + SEARCH_USD
    refused = _ask(gateway, stream)  # the search spent the budget the tokens had not
    assert refused.status_code == 429, refused.text
    assert refused.headers["x-lantern-limit"] == "monthly_budget_usd"
    assert "current use 0.0138" in refused.json()["error"]["message"]
