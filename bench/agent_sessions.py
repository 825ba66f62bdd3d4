"""The note's 20-call agent session (D1-D2) replayed through Lantern to the prompt-cache fake.

Context 6000 + 1500*t tokens at call t (exact, as the upstream counts them). Reports each run's
cost relative to no caching (uncached 1, read 0.1, write 1.25): the forced-miss table, then three
messy clients (timestamp in the system prompt, shuffled tools, re-ordered JSON keys) passed
through unchanged and with Lantern's normalisation. Run: python -m bench.agent_sessions
"""

from __future__ import annotations

import argparse
import collections
import copy
import math
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx

from adapters import anthropic_wire
from adapters.tokens import TokenCounter
from gateway.prompt_cache import TiktokenEncoder, prepare
from policies.cache import CachePolicy, NormalisePolicy
from tests.fakes.prompt_cache import PromptCacheFake

MODEL = "claude-sonnet-4-5"
NUM_CALLS = 20
FIRST_CONTEXT = 6000
STEP = 1500
TOOL_TIME_S = 20.0  # seconds between calls while a tool runs
EXPIRED_GAP_S = 301.0  # past the 5-minute lifetime: the cache is lost
NOTE_TABLE = {0: 19.8, 1: 29.2, 2: 34.3, 5: 49.6, 10: 75.2, 19: 125.0}
Messy = Literal["clean", "timestamp", "shuffled_tools", "json_keys"]
Body = dict[str, Any]


def miss_calls(num_misses: int) -> frozenset[int]:
    """The note's rule: misses spread evenly over calls 1..19, the last call always one."""
    if num_misses == 0:
        return frozenset()
    step = math.ceil((NUM_CALLS - 1) / num_misses)
    return frozenset(NUM_CALLS - 1 - k * step for k in range(num_misses))


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_000_000.0

    def __call__(self) -> float:
        return self.now_s


def _tools() -> list[Body]:
    names = ("read_file", "write_file", "run_tests", "search_code", "list_dir", "http_get")
    return [
        {
            "name": name,
            "description": f"{name.replace('_', ' ').capitalize()} inside the task workspace."
            + " detail" * 40,
            "input_schema": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "workspace-relative path"},
                    "query": {"type": "string", "description": "what to look for"},
                    "limit": {"type": "integer", "minimum": 1},
                },
                "required": ["path", "query"],
            },
        }
        for name in names
    ]


SYSTEM = (
    "You are the Lantern coding agent. Work step by step, call one tool at a time." + " rule" * 900
)


@dataclass
class Session:
    """A client's view of the session: history grows by one assistant + one tool-result turn."""

    messy: Messy
    counter: TokenCounter = field(default_factory=TokenCounter)
    history: list[Body] = field(default_factory=list)

    def body(self, t: int) -> Body:
        """The request body of call t (history is extended first, padded to the exact size)."""
        if t == 0:
            self.history = [
                {"role": "user", "content": [{"type": "text", "text": "Fix the failing test."}]}
            ]
            self._pad(self.history[0]["content"][0], FIRST_CONTEXT, t)
        else:
            tool = _tools()[t % 6]["name"]
            use = {
                "type": "tool_use",
                "id": f"toolu_{t:04d}",
                "name": tool,
                "input": {"path": f"src/m{t}.py", "query": "def main", "limit": t},
            }
            self.history.append(
                {"role": "assistant", "content": [{"type": "text", "text": f"Step {t}."}, use]}
            )
            result = {
                "type": "tool_result",
                "tool_use_id": f"toolu_{t:04d}",
                "content": f"result {t}:",
            }
            self.history.append({"role": "user", "content": [result]})
            self._pad(result, FIRST_CONTEXT + STEP * t, t)
        return self._render(t)

    def _render(self, t: int) -> Body:
        rng = random.Random(t)
        tools = _tools()
        system = SYSTEM
        history = copy.deepcopy(self.history)
        if self.messy == "timestamp":
            system = f"Current time: 2026-11-30T09:{t * 3 % 60:02d}:{t * 7 % 60:02d}Z. " + SYSTEM
        elif self.messy == "shuffled_tools":
            rng.shuffle(tools)
        elif self.messy == "json_keys":
            tools = [_shuffle_keys(tool, rng) for tool in tools]
            history = [_shuffle_keys(m, rng) for m in history]
        last = history[-1]["content"][-1]
        last["cache_control"] = {"type": "ephemeral"}  # the client's own automatic-caching marker
        return {
            "model": MODEL,
            "max_tokens": 256,
            "tools": tools,
            "system": system,
            "messages": history,
        }

    def prompt_tokens(self, body: Body) -> int:
        return self.counter.count_request(anthropic_wire.decode_request(body))

    def _pad(self, part: Body, target: int, t: int) -> None:
        key = "text" if part["type"] == "text" else "content"
        for _ in range(8):
            deficit = target - self.prompt_tokens(self._render(t))
            if deficit == 0:
                return
            if deficit < 0:
                raise ValueError(f"call {t} is already {-deficit} tokens over {target}")
            part[key] += " a" * deficit
        raise ValueError(f"could not pad call {t} to {target} tokens")


def _shuffle_keys(value: Any, rng: random.Random) -> Any:
    """The same JSON with every object's keys in a random order (what a jsonb round trip does)."""
    if isinstance(value, dict):
        keys = list(value)
        rng.shuffle(keys)
        return {k: _shuffle_keys(value[k], rng) for k in keys}
    if isinstance(value, list):
        return [_shuffle_keys(v, rng) for v in value]
    return value


HopFactory = Callable[["PromptCacheFake", "Clock"], "Hop"]


class Hop(Protocol):
    """How a body reaches the fake provider; returns (uncached, read, write) tokens."""

    def send(self, body: Body, prompt_tokens: int) -> tuple[int, int, int]: ...


@dataclass
class Direct:
    """No gateway: the client's body reaches the provider unchanged."""

    fake: PromptCacheFake

    def send(self, body: Body, prompt_tokens: int) -> tuple[int, int, int]:
        return self.fake.account("anthropic", body, prompt_tokens)


SECRET = b"bench-secret"
NORMALISED = CachePolicy(
    normalise=NormalisePolicy(relocate_volatile=True, canonical_tool_args=True), ttl="5m"
)


@dataclass
class InProcessLantern:
    """Lantern's prompt preparation called in-process (what the gateway does), then the fake."""

    fake: PromptCacheFake
    policy: CachePolicy
    counter: TokenCounter = field(default_factory=TokenCounter)
    encoder: TiktokenEncoder = field(default_factory=TiktokenEncoder)

    @classmethod
    def factory(cls, policy: CachePolicy) -> HopFactory:
        return lambda fake, clock: cls(fake, policy)

    def send(self, body: Body, prompt_tokens: int) -> tuple[int, int, int]:
        request = anthropic_wire.decode_request(body)
        prepared = prepare("anthropic", body, request, self.policy, "acme", SECRET, self.encoder)
        edited = dict(prepared.body)
        prompt = self.counter.count_request(anthropic_wire.decode_request(edited))
        return self.fake.account("anthropic", edited, prompt)


@dataclass(frozen=True, slots=True)
class RunResult:
    label: str
    cost: float
    uncached_cost: int
    calls: tuple[tuple[int, int, int], ...]

    @property
    def percent(self) -> float:
        return 100.0 * self.cost / self.uncached_cost


def run_session(
    label: str, messy: Messy, hop: Hop, clock: Clock, misses: frozenset[int] = frozenset()
) -> RunResult:
    session = Session(messy)
    cost, baseline, calls = 0.0, 0, []
    for t in range(NUM_CALLS):
        body = session.body(t)
        prompt = session.prompt_tokens(body)
        clock.now_s += EXPIRED_GAP_S if t in misses else TOOL_TIME_S
        uncached, read, write = hop.send(body, prompt)
        cost += uncached + 0.1 * read + 1.25 * write
        baseline += prompt
        calls.append((uncached, read, write))
    return RunResult(label, cost, baseline, tuple(calls))


def fresh(factory: HopFactory) -> tuple[Hop, Clock]:
    clock = Clock()
    return factory(PromptCacheFake(clock), clock), clock


def miss_table(factory: HopFactory) -> list[tuple[int, float, float]]:
    rows = []
    for m, note in NOTE_TABLE.items():
        hop, clock = fresh(factory)
        result = run_session(f"{m} misses", "clean", hop, clock, miss_calls(m))
        rows.append((m, result.percent, note))
    return rows


@dataclass(frozen=True, slots=True)
class MessyRow:
    client: Messy
    passed_through: RunResult
    with_lantern: RunResult
    passthrough_diagnoses: str
    lantern_diagnoses: str


def diagnoses(hop: Hop) -> str:
    """Lantern's x-lantern-cache verdicts over calls 1..19 (gateway hop only), e.g. "kept x19"."""
    seen = getattr(hop, "headers_seen", [])[1:]
    counts = collections.Counter(h.split(";")[0] for h in seen)
    return ", ".join(f"{reason} x{n}" for reason, n in counts.most_common()) or "-"


def messy_table(passthrough: HopFactory, lantern: HopFactory) -> list[MessyRow]:
    rows = []
    for messy in ("clean", "timestamp", "shuffled_tools", "json_keys"):
        plain_hop, plain_clock = fresh(passthrough)
        plain = run_session(messy, messy, plain_hop, plain_clock)
        lantern_hop, lantern_clock = fresh(lantern)
        normalised = run_session(messy, messy, lantern_hop, lantern_clock)
        rows.append(
            MessyRow(messy, plain, normalised, diagnoses(plain_hop), diagnoses(lantern_hop))
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--via", choices=("inprocess", "gateway"), default="gateway")
    args = parser.parse_args()
    if args.via == "inprocess":
        report(args.via, InProcessLantern.factory(NORMALISED), lambda fake, clock: Direct(fake))
        return
    with tempfile.TemporaryDirectory() as var_dir:
        bench = GatewayBench(Path(var_dir))
        try:
            report(args.via, bench.factory("lantern"), bench.factory("raw"))
        finally:
            bench.close()


def report(via: str, lantern: HopFactory, passthrough: HopFactory) -> None:
    print(f"Lantern hop: {via}; model {MODEL}; prices: uncached 1, read 0.1, write 1.25 (5 min)")
    print(
        "\nForced misses (clean session through Lantern; a miss = the 5-minute lifetime ran out)\n"
    )
    print("| misses | miss calls | measured | note | difference |\n| --- | --- | --- | --- | --- |")
    for m, measured, note in miss_table(lantern):
        calls = ", ".join(str(c) for c in sorted(miss_calls(m))) or "-"
        print(f"| {m} | {calls} | {measured:.2f} % | {note:.1f} % | {measured - note:+.2f} |")
    print(
        "\nMessy clients (cost relative to no caching; Lantern's x-lantern-cache verdicts for calls 1-19)\n"
    )
    print(
        "| client | passed through | verdicts | with Lantern | verdicts |\n| --- | --- | --- | --- | --- |"
    )
    for row in messy_table(passthrough, lantern):
        print(
            f"| {row.client} | {row.passed_through.percent:.2f} % | {row.passthrough_diagnoses} "
            f"| {row.with_lantern.percent:.2f} % | {row.lantern_diagnoses} |"
        )


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
        lantern_cache = {"normalise": {"relocate_volatile": True, "canonical_tool_args": True}}
        raw_cache = {"markers": "off", "normalise": {"order_tools": False, "canonical_json": False}}
        write_policy(policies, "lantern", self.KEYS["lantern"], models=[MODEL], cache=lantern_cache)
        write_policy(policies, "raw", self.KEYS["raw"], models=[MODEL], cache=raw_cache)
        backend = {
            "kind": "anthropic",
            "name": "fake-anthropic",
            "base_url": self.upstream.base_url,
            "model": MODEL,
            "api_key_env": None,
            "timeout_s": 60,
        }
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


if __name__ == "__main__":
    main()
