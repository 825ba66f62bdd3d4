"""Tool runs through `lantern`'s own wiring: sandboxed, idempotent, per tenant."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.e2e.harness import start_gateway, write_config, write_policy
from tests.fakes.upstream import FakeUpstream

KEY = "lt-tools-key-0000000000000000000000000001"


def test_tool_run_is_sandboxed_replayed_and_scoped(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    write_policy(
        tmp_path / "policies",
        "acme",
        KEY,
        tools=[
            {
                "name": "run_python",
                "runner": "local",
                "command": ["python3", "-c", "{code}"],
                "egress": [],
                "limits": {"wall_s": 20, "memory_mb": 256, "cpu_s": 10, "output_kb": 4},
            }
        ],
    )
    with FakeUpstream() as fake:
        models = [
            {
                "name": "gpt-4o-mini",
                "backends": [
                    {
                        "kind": "openai_compatible",
                        "name": "fake",
                        "base_url": fake.openai_base_url,
                        "model": "gpt-4o-mini",
                    }
                ],
            }
        ]
        gw = start_gateway(write_config(tmp_path / "lantern.yaml", tmp_path, models))
        try:
            url = f"{gw.url}/v1/tools/runs"
            headers = {"authorization": f"Bearer {KEY}", "idempotency-key": "step-1"}
            body = {
                "tool": "run_python",
                "arguments": {"code": "import os; print(6*7, os.environ.get('HOME'))"},
            }
            first = httpx.post(url, json=body, headers=headers, timeout=60)
            assert first.status_code == 200, first.text
            run = first.json()
            assert (run["status"], run["exit_code"]) == ("succeeded", 0)
            assert run["stdout"].startswith("42 ")
            again = httpx.post(url, json=body, headers=headers, timeout=60)
            assert again.headers["idempotent-replayed"] == "true"
            assert again.content == first.content
            changed = httpx.post(
                url, json={**body, "arguments": {"code": "print(1)"}}, headers=headers, timeout=60
            )
            assert changed.status_code == 422
            assert changed.json()["error"]["code"] == "idempotency_key_reused"
            fetched = httpx.get(f"{url}/{run['id']}", headers=headers, timeout=10)
            assert fetched.json()["id"] == run["id"]
            denied = httpx.post(
                url,
                json={"tool": "rm_rf", "arguments": {}},
                timeout=10,
                headers={**headers, "idempotency-key": "step-2"},
            )
            assert denied.status_code == 403
            assert httpx.post(url, json=body, timeout=10).status_code == 401
        finally:
            gw.stop()
