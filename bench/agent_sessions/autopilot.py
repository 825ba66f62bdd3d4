"""The autopilot traces (bench/agent_sessions/traces.py) through Lantern's prompt port with the
DEFAULT cache policy, in-process, to the provider fake; each against no caching and its ideal.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from adapters.tokens import TokenCounter
from adapters.wire import anthropic as anthropic_wire
from bench.agent_sessions.hops import SECRET, Clock
from bench.agent_sessions.ideal import ideal_cost
from bench.agent_sessions.session import Body
from bench.agent_sessions.traces import NUM_CALLS, TRACES, Trace
from gateway.core.prompt_cache import PromptCachePort, TiktokenEncoder
from gateway.ports import CacheVerdict
from policies.model import TenantPolicy
from tests.fakes.prompt_cache import Accounting, PromptCacheFake


@dataclass(frozen=True, slots=True)
class TraceResult:
    name: str
    uncached: int
    cost: float
    ideal: float
    headers: tuple[str, ...]
    ttls: tuple[str, ...]  # the lifetime Lantern chose per call
    diagnoses: tuple[str, ...] = ()  # the ledger's cache_diagnosis JSON per call
    calls: tuple[Accounting, ...] = ()  # what the provider fake billed per call
    clairvoyant: float = 0.0  # the oracle that also knows when each call comes

    @property
    def percent(self) -> float:
        return 100.0 * self.cost / self.uncached

    @property
    def ideal_percent(self) -> float:
        return 100.0 * self.ideal / self.uncached

    @property
    def clairvoyant_percent(self) -> float:
        return 100.0 * self.clairvoyant / self.uncached

    def verdicts(self) -> str:
        counts = Counter(h.split(";")[0] for h in self.headers[1:])
        return ", ".join(f"{reason} x{n}" for reason, n in counts.most_common()) or "-"


class PortHop:
    """Lantern's prompt port (prepare, then observe once admitted) on the trace's clock."""

    def __init__(self, clock: Clock, tenant: TenantPolicy | None = None) -> None:
        self.clock = clock
        self.port = PromptCachePort(SECRET, encoder=TiktokenEncoder(), clock=clock)
        self.tenant = tenant or TenantPolicy(tenant="acme")
        self.counter = TokenCounter()

    def send(self, body: Body) -> tuple[Body, CacheVerdict, str]:
        request = anthropic_wire.decode_request(body)
        prepared = self.port.prepare("anthropic", body, request, self.tenant, request.model)
        verdict = self.port.observe(self.tenant, prepared.session_root, prepared)
        return dict(prepared.body), verdict, prepared.write_ttl


def run_trace(
    trace: Trace, tenant: TenantPolicy | None = None, hop: PortHop | None = None
) -> TraceResult:
    """`tenant`: the policy to run under (the default policy when None); `hop`: a port that
    served earlier sessions (what its autopilot learnt carries over), on a fresh provider."""
    hop = hop or PortHop(Clock(), tenant)
    clock = hop.clock
    fake = PromptCacheFake(clock)
    counter = TokenCounter()
    bodies, times, prompts, stable_prompts, verdicts, ttls = [], [], [], [], [], []
    for t in range(NUM_CALLS):
        body = trace.body(t)
        clock.now_s += trace.gap_s(t)
        edited, verdict, ttl = hop.send(body)
        prompt = counter.count_request(anthropic_wire.decode_request(edited))
        fake.account("anthropic", edited, prompt)
        bodies.append(trace.stable(body))
        times.append(clock.now_s)
        prompts.append(counter.count_request(anthropic_wire.decode_request(body)))
        stable_prompts.append(counter.count_request(anthropic_wire.decode_request(bodies[-1])))
        verdicts.append(verdict)
        ttls.append(ttl)
    cost = sum(call.cost() for call in fake.calls)
    # the ideal: the calls with a prefix stable from the first call, knowing every call's
    # content but not when it comes (as a gateway); the clairvoyant bound also knows the gaps
    ideal = min(
        ideal_cost(bodies, times, stable_prompts, fixed_ttl=ttl).cost for ttl in ("5m", "1h")
    )
    return TraceResult(
        trace.name,
        sum(prompts),
        cost,
        ideal,
        tuple(v.header for v in verdicts),
        tuple(ttls),
        tuple(v.diagnosis_json for v in verdicts),
        tuple(fake.calls),
        ideal_cost(bodies, times, stable_prompts).cost,
    )


def autopilot_table() -> list[TraceResult]:
    return [run_trace(make()) for make in TRACES]


def main() -> None:
    print(
        "| trace | with Lantern (default policy) | ideal | difference | clairvoyant bound "
        "| verdicts |\n| --- | --- | --- | --- | --- | --- |"
    )
    for r in autopilot_table():
        print(
            f"| {r.name} | {r.percent:.2f} % | {r.ideal_percent:.2f} % "
            f"| {r.percent - r.ideal_percent:+.2f} | {r.clairvoyant_percent:.2f} % "
            f"| {r.verdicts()} |"
        )


if __name__ == "__main__":
    main()
