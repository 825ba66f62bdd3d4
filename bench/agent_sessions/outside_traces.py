"""The outside traces (bench/traces/outside/) as calls, and the two references each session's
cost with Lantern is held to, worked out in-process against the provider fake:

- without Lantern: the client's calls straight to the provider with only the client's own
  markers (none), on the upstream's wire (a translated call as a plain translator sends it);
- ideal: the same calls with a prefix stable from the first call (the trace's `stable`
  rendering), cached as well as the provider allows: Anthropic by an oracle that knows every
  later call of the group (unlimited breakpoints and look-back; it writes the longest prefix a
  later call shares, and one write serves a fan-out), OpenAI by the provider's own automatic
  caching. Both see the calls one after another, so the ideal fan-out writes its head once.
  With `foresight=False` the oracle writes each call's whole prompt instead (it does not know
  which call is a session's last, or comes before a history edit): shown beside the ideal.
"""

from __future__ import annotations

import json
import lzma
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.tokens import TokenCounter
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from bench.agent_sessions.ideal import common_end
from tests.fakes.prompt_cache import (
    PRICE_READ,
    PRICE_WRITE,
    PromptCacheFake,
    anthropic_blocks,
    min_tokens_for,
)

TRACES = Path(__file__).resolve().parents[1] / "traces" / "outside"
ROUND_S = 10.0  # simulated seconds between rounds: well inside every cache lifetime
PREFILL_S_PER_TOKEN = 2e-5  # calls of one round cannot read what the others are still writing
Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Call:
    group: str
    session: str
    tenant: str
    route: str  # anthropic | openai | translated
    round: int
    stream: bool
    body: Json  # as the client sends it, on the client's wire
    stable: Json

    @property
    def door(self) -> str:
        return "anthropic" if self.route == "anthropic" else "openai"

    @property
    def upstream_wire(self) -> str:
        return "openai" if self.route == "openai" else "anthropic"


def load(directory: Path = TRACES) -> list[Call]:
    calls = []
    for path in sorted(directory.glob("*.jsonl.xz")):
        with lzma.open(path, "rt") as lines:
            calls += [Call(**json.loads(line)) for line in lines]
    return calls


def groups(calls: Iterable[Call]) -> dict[str, list[Call]]:
    """Each group's calls in sending order (by round; a round's calls go at once)."""
    out: dict[str, list[Call]] = {}
    for call in calls:
        out.setdefault(call.group, []).append(call)
    return {name: sorted(group, key=lambda c: c.round) for name, group in out.items()}


def on_upstream_wire(call: Call, body: Json) -> Json:
    """The body as the upstream gets it without Lantern (translated by the wire codecs)."""
    if call.route != "translated":
        return body
    return anthropic_wire.encode_request(openai_wire.decode_request(body))


def prompt_tokens(counter: TokenCounter, wire: str, body: Json) -> int:
    codec = anthropic_wire if wire == "anthropic" else openai_wire
    return counter.count_request(codec.decode_request(body))


def direct_costs(calls: Sequence[Call], *, stable: bool) -> dict[str, float]:
    """Each session's cost (input-token units) sent straight to a fresh provider fake, a round's
    calls at once (none reads what another of its round writes)."""
    clock = _SimClock()
    fake = PromptCacheFake(clock, prefill_s_per_token=PREFILL_S_PER_TOKEN)
    counter = TokenCounter()
    costs: dict[str, float] = {}
    last_round = None
    for call in calls:
        if call.round != last_round:
            clock.now_s += ROUND_S
            last_round = call.round
        body = on_upstream_wire(call, call.stable if stable else call.body)
        wire = call.upstream_wire
        fake.principal = call.tenant
        fake.account(wire, body, prompt_tokens(counter, wire, body), api_key=call.tenant)
        costs[call.session] = costs.get(call.session, 0.0) + fake.calls[-1].cost()
    return costs


def uncached(calls: Sequence[Call]) -> dict[str, int]:
    """Each session's prompt tokens as the upstream counts the client's calls: the cost with
    no cache at all."""
    counter = TokenCounter()
    out: dict[str, int] = {}
    for call in calls:
        body = on_upstream_wire(call, call.body)
        out[call.session] = out.get(call.session, 0) + prompt_tokens(
            counter, call.upstream_wire, body
        )
    return out


def ideal_costs(calls: Sequence[Call], *, foresight: bool = True) -> dict[str, float]:
    """Each session's ideal: Anthropic by the oracle, OpenAI by serial automatic caching."""
    out: dict[str, float] = {}
    for group in groups(calls).values():
        for session in {c.session for c in group}:
            mine = [c for c in group if c.session == session]
            if mine[0].upstream_wire == "anthropic":
                out[session] = anthropic_oracle(mine, foresight=foresight)
            else:
                serial = [Call(**{**_fields(c), "round": i}) for i, c in enumerate(mine)]
                out[session] = direct_costs(serial, stable=True)[session]
    return out


def anthropic_oracle(calls: Sequence[Call], *, foresight: bool = True) -> float:
    """Reads the longest live prefix any earlier call wrote; writes (5 min) the longest prefix
    a later call shares (without foresight: its whole prompt), when that is over the model's
    minimum and past what it read."""
    counter = TokenCounter()
    bodies = [on_upstream_wire(c, c.stable) for c in calls]
    chains = [
        anthropic_blocks(b, lambda text, m=b["model"]: counter.count_text(m, text)) for b in bodies
    ]
    cached: set[bytes] = set()
    cost = 0.0
    for t, chain in enumerate(chains):
        read = max((b.end for b in chain if b.digest in cached), default=0)
        shared = max((common_end(chain, later) for later in chains[t + 1 :]), default=0)
        if not foresight:
            shared = chain[-1].end if chain else 0
        minimum = min_tokens_for(str(bodies[t]["model"]))
        written = shared if shared >= minimum and shared > read else read
        cached.update(b.digest for b in chain if b.end <= written)
        prompt = prompt_tokens(counter, "anthropic", bodies[t])
        cost += PRICE_READ * read + PRICE_WRITE["5m"] * (written - read) + prompt - written
    return cost


def _fields(call: Call) -> Json:
    return {name: getattr(call, name) for name in Call.__slots__}


class _SimClock:
    def __init__(self) -> None:
        self.now_s = 1_000_000.0

    def __call__(self) -> float:
        return self.now_s
