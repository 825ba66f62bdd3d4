"""A session through the gateway, then `lantern cache explain` over what the ledger recorded."""

from __future__ import annotations

import time
from pathlib import Path

import anthropic
import pytest

from gateway.cli.main import main
from tests.e2e.harness import start_gateway, write_config, write_policy
from tests.fakes.prompt_cache import PromptCacheFake
from tests.fakes.upstream import FakeUpstream

KEY = "lt-explain-key-00000000000000000000000001"
SYSTEM = "You are a meticulous agent. " * 300  # long enough to be a cacheable prefix
TOOLS = [
    {"name": n, "description": f"tool {n}", "input_schema": {"type": "object"}}
    for n in ("search", "edit", "run")
]


def test_explain_names_the_call_that_changed_the_system_prompt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", KEY)
    with FakeUpstream(cache=PromptCacheFake(time.monotonic)) as fake:  # reads as a provider would
        models = [
            {
                "name": "claude-sonnet-4-5",
                "backends": [
                    {
                        "kind": "anthropic",
                        "name": "fake-anthropic",
                        "base_url": fake.base_url,
                        "model": "claude-sonnet-4-5",
                        "api_key_env": None,
                    }
                ],
            }
        ]
        config = write_config(tmp_path / "lantern.yaml", tmp_path, models)
        gw = start_gateway(config)
        try:
            client = anthropic.Anthropic(
                base_url=gw.url,
                api_key=KEY,
                max_retries=0,
                default_headers={"x-session-id": "task-7"},
            )
            history: list[dict[str, object]] = []
            headers = []
            for turn, system in enumerate((SYSTEM, SYSTEM, SYSTEM + " Today is Monday.")):
                history.append({"role": "user", "content": f"turn {turn} words:3"})
                raw = client.messages.with_raw_response.create(
                    model="claude-sonnet-4-5",
                    max_tokens=16,
                    system=system,
                    tools=TOOLS,
                    messages=history,
                )
                headers.append(raw.headers["x-lantern-cache"])
                history.append({"role": "assistant", "content": raw.parse().content[0].text})
        finally:
            gw.stop()
    assert headers[0].startswith("first_call")
    assert headers[1].startswith("kept")
    assert headers[2].startswith("system_changed")
    time.sleep(0.1)
    assert (
        main(
            ["cache", "explain", "--session", "task-7", "--tenant", "acme", "--config", str(config)]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "Session task-7: 3 calls; prefix kept on 1 of 2 follow-up calls (50.0 %)" in out
    assert "call 2 at system" in out and "system changed" in out
    # the backend's reported cache reads stand beside the prediction: the kept call read its
    # cached prefix, and the provider-faithful fake said so
    [kept] = [line.split() for line in out.splitlines() if line.startswith("   1  ")]
    predicted, reported = int(kept[7]), int(kept[8])
    assert kept[3] == "kept" and predicted > 0 and reported > 0
