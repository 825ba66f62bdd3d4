"""The simulated world's data: the scenario (`SimConfig`), agent sessions, their calls, and
the replicas that serve them. Plain state; the simulation loop lives in `simulation.py`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.fleet_pool import Pool
from gateway.ports import Attempt


@dataclass(frozen=True)
class SimConfig:
    replicas: int = 4
    block_tokens: int = 16
    kv_blocks: int = 0  # per replica; 0: sized so the working set is ws_target of the fleet's KV
    ws_target: float = 0.70
    agent_types: int = 4
    system_blocks: int = 128  # shared system prompt + tools per agent type (2048 tokens)
    session_rate: float = 0.5  # new top-level sessions per second
    turns: tuple[int, int] = (6, 14)
    tool_blocks: tuple[int, int] = (8, 48)  # appended per turn (128..768 tokens)
    answer_blocks: tuple[int, int] = (2, 10)
    think_mean_s: float = 3.0  # tool run time between an answer and the next call
    fork_prob: float = 0.2  # a turn forks a sub-agent from the parent's context
    fork_turns: tuple[int, int] = (2, 4)
    duration_s: float = 600.0
    warmup_s: float = 60.0
    step_base_s: float = 0.0143
    step_per_token_s: float = 0.074e-3
    token_budget: int = 2048
    max_seqs: int = 64
    replica_usd_per_h: float = 12.0
    # the engines' load metrics (waiting, KV usage) reach the router every poll_s, so they are
    # up to poll_s stale; 0: no engine signal (router-side counts only). The oracle sees the
    # true state at every decision.
    poll_s: float = 1.0
    check_signal: bool = False  # record the fleet's view of each engine against the truth


@dataclass
class Session:
    sid: str
    stream: list[bytes]
    unique_from: int
    turns_left: int
    rng: random.Random
    calls: int = 0
    forked: bool = False


@dataclass
class Req:
    session: Session
    arrival: float
    prompt: list[bytes]  # prompt blocks
    answer: list[bytes]  # answer blocks (their content is fixed when the turn is drawn)
    attempt: Attempt | None = None
    hit_blocks: int = 0
    prefill_left: int = 0
    generated: int = 0
    ttft: float | None = None
    admitted_at: float | None = None
    first_turn: bool = False  # a new session's or fork's first call (placement, not stickiness)
    queue_ahead: int = 0  # requests waiting on the replica when this one was dispatched
    predicted_ttft: float = 0.0
    predicted_wait: float = 0.0


@dataclass
class Replica:
    key: str
    pool: Pool
    waiting: list[Req] = field(default_factory=list)
    running: list[Req] = field(default_factory=list)
    busy: bool = False
    busy_s: float = 0.0
    work_tokens: int = 0
