"""An orchestrator starts 8 sub-agents at once on one 20,000-token prefix: through a real
gateway (default cache policy) to the provider fake, whose prefill takes time and whose entries
are readable only once prefilled; with Lantern's fan-out gate, and with every call sent at once.
With `--redis-url`, the sub-agents' calls are spread over `--gateways` gateways that share
only that Redis (each its own app, pipeline and gate), as over several gateway processes.

    python -m bench.agent_sessions.fanout [--rounds 3] [--redis-url URL --gateways 2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from adapters.tokens import TokenCounter
from adapters.wire import anthropic as anthropic_wire
from bench.agent_sessions.gateway_hop import fake_anthropic_backend
from gateway.core.fanout import FanoutGate
from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.prompt_cache import Accounting, PromptCacheFake
from tests.fakes.upstream import FakeUpstream

MODEL = "claude-sonnet-4-5"
KEY = "lt-bench-fanout-key-0001"
NUM_AGENTS = 8
PREFIX_TOKENS = 20_000
PREFILL_S_PER_TOKEN = 1e-4  # 20,000 fresh tokens: 2 s to the first byte
CHUNK_DELAY_S = 0.02  # between reply chunks (the sub-agent's answer streaming)
Together = Callable[[], bool]


def system_text(tokens: int = PREFIX_TOKENS) -> str:
    """The orchestrator's shared instructions, padded to about `tokens`."""
    head = "You are a sub-agent of Acme's code-review orchestrator. Follow the house rules."
    counter = TokenCounter()
    text, n = head, 0
    while counter.count_text(MODEL, text) < tokens - 8:
        n += 1
        text += f" Rule {n}: keep each change small and explain it."
    return text


def agent_body(system: str, agent: int, round_: int = 0) -> dict[str, Any]:
    task = f"Round {round_}, sub-agent {agent}: review module {agent} of the payments service."
    return {
        "model": MODEL,
        "max_tokens": 256,
        "stream": True,
        "system": system,
        "messages": [{"role": "user", "content": task}],
    }


@dataclass(frozen=True, slots=True)
class AgentCall:
    status: int
    ttft_s: float
    total_s: float


@dataclass(frozen=True, slots=True)
class FanoutRun:
    gated: bool
    calls: tuple[AgentCall, ...]
    billed: tuple[Accounting, ...]  # what the provider fake billed, in arrival order

    @property
    def cost(self) -> float:
        return sum(c.cost() for c in self.billed)

    @property
    def num_head_writes(self) -> int:
        return sum(1 for c in self.billed if c.write >= PREFIX_TOKENS)

    @property
    def makespan_s(self) -> float:
        return max(c.total_s for c in self.calls)


class FanoutBench:
    """One tenant, one Anthropic backend (the provider fake over HTTP), and one gateway, or
    `num_gateways` sharing `redis_url` (each with its own database and memory)."""

    def __init__(
        self,
        var_dir: Path,
        prefill_s_per_token: float = PREFILL_S_PER_TOKEN,
        redis_url: str | None = None,
        num_gateways: int = 1,
    ) -> None:
        self.prefill_s_per_token = prefill_s_per_token
        self.upstream = FakeUpstream(reply_words=40).start()
        self.upstream.app.chunk_delay_s = CHUNK_DELAY_S
        shared = {} if redis_url is None else {"redis_url": redis_url}
        self.gateways: list[RunningGateway] = []
        for n in range(num_gateways if redis_url else 1):
            home = var_dir / f"gateway-{n}"
            (home / "policies").mkdir(parents=True, exist_ok=True)
            write_policy(home / "policies", "acme", KEY, models=[MODEL])
            backend = fake_anthropic_backend(self.upstream.base_url)
            models = [{"name": MODEL, "backends": [backend]}]
            config = write_config(home / "lantern.yaml", home, models, **shared)
            self.gateways.append(start_gateway(config))
        self.gateway = self.gateways[0]
        self.lease_prefix = f"lantern-bench:{uuid.uuid4().hex[:12]}:fanout:"  # this bench's own
        self.system = system_text()
        self.rounds = 0

    def _fresh_gates(self, gated: bool) -> list[FanoutGate]:
        """A new gate per gateway (the reference: no call leads, so none waits), each keeping
        its gateway's Redis leases under this bench's key prefix."""
        gates = []
        for gateway in self.gateways:
            pipeline = gateway.components.pipeline
            gate = FanoutGate() if gated else FanoutGate(max_leads_per_tenant=0)
            gate.shared = pipeline.fanout.shared
            if gate.shared is not None:
                gate.shared.key_prefix = self.lease_prefix
            pipeline.fanout = gate
            gates.append(gate)
        return gates

    def run(self, gated: bool = True, fail_first: bool = False, hold: bool = False) -> FanoutRun:
        """One fan-out on a fresh provider cache, with a system prompt and tasks no earlier run
        sent (the same tasks would link each sub-agent to its earlier session). `hold`: the
        provider serves nothing until every call has arrived (tests: "together" on any box)."""
        fake = PromptCacheFake(time.monotonic, prefill_s_per_token=self.prefill_s_per_token)
        self.upstream.app.cache = fake
        gates = self._fresh_gates(gated)
        if fail_first:
            self.upstream.fail_next(500)
        self.rounds += 1
        system = f"Round {self.rounds}. {self.system}"
        bodies = [agent_body(system, i, self.rounds) for i in range(NUM_AGENTS)]
        app, sent = self.upstream.app, len(self.upstream.requests)

        def together() -> bool:
            """Every call arrived: the first at the provider, the rest waiting behind it (or,
            ungated, all at the provider)."""
            if gated:
                waited = sum(gate.num_waited for gate in gates)
                return len(app.requests) > sent and waited >= NUM_AGENTS - 1
            return len(app.requests) >= sent + NUM_AGENTS

        if hold:
            app.hold = threading.Event()
        urls = [g.url for g in self.gateways]
        try:
            calls = asyncio.run(_send_all(urls, bodies, app.hold, together))
        finally:
            if app.hold is not None:
                app.hold.set()
            app.hold = None
        return FanoutRun(gated, tuple(calls), tuple(fake.calls))

    def close(self) -> None:
        for gateway in self.gateways:
            gateway.stop()
        self.upstream.stop()


async def _send_all(
    urls: list[str],
    bodies: list[dict[str, Any]],
    hold: threading.Event | None,
    together: Together,
) -> list[AgentCall]:
    """Send every body at once (sub-agent i to gateway i mod n); with `hold`, set it once
    `together()` says all have arrived."""
    limits = httpx.Limits(max_connections=len(bodies))
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        sending = asyncio.gather(
            *(_send(client, urls[i % len(urls)], b) for i, b in enumerate(bodies))
        )
        while hold is not None and not together():
            await asyncio.sleep(0.005)
        if hold is not None:
            hold.set()
        return list(await sending)


async def _send(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> AgentCall:
    started = time.monotonic()
    ttft = None
    headers = {"x-api-key": KEY}
    async with client.stream("POST", url + "/v1/messages", json=body, headers=headers) as reply:
        async for line in reply.aiter_lines():
            if ttft is None and "content_block_delta" in line:
                ttft = time.monotonic() - started
    total = time.monotonic() - started
    return AgentCall(reply.status_code, total if ttft is None else ttft, total)


def prompt_tokens(body: dict[str, Any]) -> int:
    return TokenCounter().count_request(anthropic_wire.decode_request(body))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved pairs of runs")
    parser.add_argument("--redis-url", default=None, help="gateways share this Redis")
    parser.add_argument("--gateways", type=int, default=2, help="with --redis-url")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as var_dir:
        bench = FanoutBench(Path(var_dir), PREFILL_S_PER_TOKEN, args.redis_url, args.gateways)
        try:
            runs = [bench.run(gated) for _ in range(args.rounds) for gated in (False, True)]
        finally:
            bench.close()
    print(
        "| run | head writes | cost (input-token units) | mean TTFT s | mean latency s | makespan s |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for run in runs:
        print(
            f"| {'gated' if run.gated else 'all at once'} | {run.num_head_writes} "
            f"| {run.cost:.0f} | {statistics.mean(c.ttft_s for c in run.calls):.3f} "
            f"| {statistics.mean(c.total_s for c in run.calls):.3f} | {run.makespan_s:.3f} |"
        )


if __name__ == "__main__":
    main()
