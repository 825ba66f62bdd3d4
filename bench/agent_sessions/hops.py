"""How a session's body reaches the prompt-cache fake, and the simulated clock both share:
directly (no gateway) or through Lantern's prompt preparation called in-process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from adapters.tokens import TokenCounter
from adapters.wire import anthropic as anthropic_wire
from bench.agent_sessions.session import Body
from gateway.core.prompt_cache import TiktokenEncoder, prepare
from policies.cache import CachePolicy, NormalisePolicy
from tests.fakes.prompt_cache import PromptCacheFake


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_000_000.0

    def __call__(self) -> float:
        return self.now_s


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
