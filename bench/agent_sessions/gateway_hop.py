"""The hop through a real Lantern gateway (uvicorn, real settings and policy files, two
tenants) to the HTTP prompt-cache fake, on each run's simulated clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.agent_sessions.hops import Clock, Hop, HopFactory
from bench.agent_sessions.session import MODEL, Body
from tests.fakes.prompt_cache import PromptCacheFake


def fake_anthropic_backend(base_url: str) -> dict[str, Any]:
    """The gateway's backend entry for the Anthropic prompt-cache fake at `base_url`."""
    return {
        "kind": "anthropic",
        "name": "fake-anthropic",
        "base_url": base_url,
        "model": MODEL,
        "api_key_env": None,
        "timeout_s": 60,
    }


@dataclass
class GatewayHop:
    """Through a real Lantern gateway (uvicorn, real settings and policy files) to the HTTP fake."""

    gateway: Any
    upstream: Any
    api_key: str
    session_id: str
    headers_seen: list[str] = field(default_factory=list)

    def send(self, body: Body, prompt_tokens: int) -> tuple[int, int, int]:
        headers = {"x-api-key": self.api_key, "x-session-id": self.session_id}
        reply = httpx.post(
            f"{self.gateway.url}/v1/messages", json=body, headers=headers, timeout=60.0
        )
        reply.raise_for_status()
        self.headers_seen.append(reply.headers.get("x-lantern-cache", ""))
        usage = reply.json()["usage"]
        return (
            usage["input_tokens"],
            usage["cache_read_input_tokens"],
            usage["cache_creation_input_tokens"],
        )


class _RunClock:
    """The gateway's clock: whichever run's simulated clock is current."""

    def __init__(self) -> None:
        self.current = Clock()

    def __call__(self) -> float:
        return self.current()


class GatewayBench:
    """One gateway with two tenants in front of one fake upstream; each run gets a fresh cache."""

    KEYS = {"lantern": "lt-bench-lantern-key", "raw": "lt-bench-passthrough-key"}

    def __init__(self, var_dir: Path) -> None:
        from tests.e2e.harness import start_gateway, write_config, write_policy
        from tests.fakes.upstream import FakeUpstream

        self.upstream = FakeUpstream().start()
        policies = var_dir / "policies"
        policies.mkdir(parents=True, exist_ok=True)
        # the note's forced misses assume the 5-minute lifetime (`ttl: auto` would learn 1 h)
        lantern_cache = {
            "ttl": "5m",
            "normalise": {"relocate_volatile": True, "canonical_tool_args": True},
        }
        raw_cache = {"markers": "off", "normalise": {"order_tools": False, "canonical_json": False}}
        write_policy(policies, "lantern", self.KEYS["lantern"], models=[MODEL], cache=lantern_cache)
        write_policy(policies, "raw", self.KEYS["raw"], models=[MODEL], cache=raw_cache)
        backend = fake_anthropic_backend(self.upstream.base_url)
        config = write_config(
            var_dir / "lantern.yaml", var_dir, [{"name": MODEL, "backends": [backend]}]
        )
        self.clock = _RunClock()  # the gateway sees each run's simulated time, gaps included
        self.gateway = start_gateway(config, clock=self.clock)
        self.runs = 0

    def factory(self, tenant: str) -> HopFactory:
        def make(fake: PromptCacheFake, clock: Clock) -> Hop:
            self.upstream.app.cache = fake
            self.clock.current = clock
            self.runs += 1
            return GatewayHop(
                self.gateway, self.upstream, self.KEYS[tenant], f"bench-{tenant}-{self.runs}"
            )

        return make

    def close(self) -> None:
        self.gateway.stop()
        self.upstream.stop()
