"""The event loop of one fleet simulation: sessions' turns dispatched through Lantern's `Fleet`,
replicas stepping with chunked prefill under the step-time model, and the run's summary.

Step time (A3, a 4-GPU replica of the note's 70B model): t = 14.3 ms + 0.074 ms x batch tokens
(a 2000-token prefill takes 162 ms; 64 decodes 19 ms). Chunked prefill, 2048-token budget.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import random
import statistics

from adapters.types import ChatRequest, Usage
from bench.fleet_pool import Pool
from bench.fleet_sim.oracle import ORACLES, OracleIndex
from bench.fleet_sim.state import Replica, Req, Session, SimConfig
from bench.fleet_trace import SignalError
from bench.routing_baselines import PICKERS
from gateway.fleet.engine_metrics import EngineLoad
from gateway.fleet.routing_port import Fleet, FleetConfig, ReplicaSpec
from gateway.ports import Candidate, ModelRoute, PreparedPrompt
from policies.model import TenantPolicy
from policies.routing import RoutingPolicy


def _chain(parent: bytes, content: int) -> bytes:
    return hashlib.blake2b(parent + content.to_bytes(8, "little"), digest_size=8).digest()


class Simulation:
    def __init__(self, cfg: SimConfig, strategy: str, seed: int, kv_blocks: int) -> None:
        self.cfg, self.strategy = cfg, strategy
        self.rng = random.Random(seed)
        self.now = 0.0
        self.events: list[tuple[float, int, str, object]] = []
        self.counter = itertools.count()
        self.content = itertools.count(10**12)
        self.replicas = [Replica(f"engine@r{i}", Pool(kv_blocks)) for i in range(cfg.replicas)]
        self.by_key = {r.key: r for r in self.replicas}
        self.system = [self._system_chain(a) for a in range(cfg.agent_types)]
        cands = tuple(
            Candidate(None, "engine", "selfhost", f"r{i}")  # type: ignore[arg-type]
            for i in range(cfg.replicas)
        )
        self.route = ModelRoute("m", cands)
        spec = ReplicaSpec(
            prefill_tok_s=1 / cfg.step_per_token_s,
            prefill_pinned=True,  # the simulator knows its engine's rate exactly
            capacity_tok_s=1 / cfg.step_per_token_s,
            kv_capacity_blocks=kv_blocks,
            base_ttft_s=cfg.step_base_s,
        )
        picker = PICKERS["lantern" if strategy in ORACLES else strategy]
        self.fleet = Fleet(
            [self.route],
            FleetConfig(block_tokens=cfg.block_tokens, picker=picker),
            specs={"engine": spec},
            clock=lambda: self.now,
            rng=random.Random(seed),
        )
        if strategy in ORACLES:
            self.fleet.index = OracleIndex(self.replicas)
        self.tenant = TenantPolicy(tenant="sim", routing=RoutingPolicy(venue="selfhost_only"))  # type: ignore[arg-type]
        self.request = ChatRequest(model="m", messages=())
        self.records: list[tuple[float, int, int]] = []  # (ttft, hit tokens, prompt tokens)
        self.traced: list[Req] = []  # the same calls, for tail_report
        self.signal_errors: list[SignalError] = []  # with cfg.check_signal, for signal_report
        self.ws_samples: list[int] = []
        self.live: dict[str, Session] = {}
        self.sids = itertools.count()

    def _system_chain(self, agent: int) -> list[bytes]:
        out, parent = [], b"sys"
        for i in range(self.cfg.system_blocks):
            parent = _chain(parent, agent * 1_000_000 + i)
            out.append(parent)
        return out

    def _extend(self, stream: list[bytes], n: int) -> None:
        parent = stream[-1] if stream else b""
        for _ in range(n):
            parent = _chain(parent, next(self.content))
            stream.append(parent)

    def push(self, t: float, kind: str, payload: object) -> None:
        heapq.heappush(self.events, (t, next(self.counter), kind, payload))

    # --- workload ---------------------------------------------------------------------------

    def start_session(self, parent: Session | None) -> None:
        cfg, rng = self.cfg, random.Random(self.rng.random())
        if parent is None:
            stream = list(self.system[rng.randrange(cfg.agent_types)])
            turns = rng.randint(*cfg.turns)
        else:
            stream = list(parent.stream)
            turns = rng.randint(*cfg.fork_turns)
        session = Session(
            f"s{next(self.sids)}", stream, len(stream), turns, rng, forked=parent is not None
        )
        self.live[session.sid] = session
        self.next_turn(session)

    def next_turn(self, s: Session) -> None:
        if s.turns_left == 0:
            del self.live[s.sid]
            return
        s.turns_left -= 1
        self._extend(s.stream, s.rng.randint(*self.cfg.tool_blocks))
        answer = [s.stream[-1]]  # the answer's chain continues the prompt's
        self._extend(answer, s.rng.randint(*self.cfg.answer_blocks))
        req = Req(s, self.now, list(s.stream), answer[1:], first_turn=s.calls == 0)
        s.calls += 1
        self.dispatch(req)
        if s.rng.random() < self.cfg.fork_prob:
            self.start_session(s)

    def engine_load(self, r: Replica) -> EngineLoad:
        """What the replica's /metrics would say right now."""
        pool = r.pool
        return EngineLoad(
            self.now,
            waiting=len(r.waiting),
            running=len(r.running),
            kv_usage=len(pool.ref) / pool.capacity,
            kv_capacity_tokens=pool.capacity * self.cfg.block_tokens,
        )

    def poll(self) -> None:
        for r in self.replicas:
            self.fleet.observe_load(r.key, self.engine_load(r))

    def dispatch(self, req: Req) -> None:
        bt = self.cfg.block_tokens
        if self.strategy == "oracle" and self.cfg.poll_s > 0:
            self.poll()
        if self.cfg.check_signal and self.now >= self.cfg.warmup_s:
            self.check_signal()
        prepared = PreparedPrompt({}, self.request, "root", "salt", tuple(req.prompt))
        plan = self.fleet.plan(
            self.route,
            self.tenant,
            req.session.sid,
            prepared,
            len(req.prompt) * bt,
            len(req.answer) * bt,
        )
        req.attempt = plan.attempts[0]
        self.fleet.on_dispatch(req.attempt, req.session.sid, prepared)
        replica = self.by_key[f"engine@{req.attempt.candidate.replica}"]
        req.queue_ahead = len(replica.waiting)
        req.predicted_ttft = float(plan.details.get("predicted_ttft_ms", 0.0)) / 1000  # type: ignore[arg-type]
        for score in plan.details.get("scores", ()):  # type: ignore[union-attr]
            if score["replica"] == replica.key:  # type: ignore[index]
                req.predicted_wait = float(score["wait_ms"]) / 1000  # type: ignore[index]
        replica.waiting.append(req)
        self.kick(replica)

    def check_signal(self) -> None:
        """The fleet's view of every replica (what the router is about to read) against the
        engine's true queue and free KV; read-only, so the run's decisions do not change."""
        for state in self.fleet.snapshot(self.now).replicas:
            r, last = self.by_key[state.key], self.fleet.signals.last(state.key)
            if state.kv_free_blocks is None or last is None:
                continue
            self.signal_errors.append(
                SignalError(
                    bool(last.waiting),
                    state.kv_free_blocks - (r.pool.capacity - len(r.pool.ref)),
                    state.queue_depth - len(r.waiting),
                )
            )

    # --- engine -----------------------------------------------------------------------------

    def kick(self, r: Replica) -> None:
        if not r.busy and (r.waiting or r.running):
            r.busy = True
            self.push(self.now, "step", r)

    def admit(self, r: Replica) -> None:
        bt = self.cfg.block_tokens
        while r.waiting and len(r.running) < self.cfg.max_seqs:
            req = r.waiting[0]
            blocks = req.prompt + req.answer
            if not r.pool.can_hold(blocks):
                break
            r.waiting.pop(0)
            req.admitted_at = self.now
            req.hit_blocks = min(r.pool.match(req.prompt), len(req.prompt) - 1)
            r.pool.acquire(blocks)
            req.prefill_left = (len(req.prompt) - req.hit_blocks) * bt
            r.running.append(req)

    def step(self, r: Replica) -> None:
        self.admit(r)
        if not r.running:
            r.busy = False
            return
        decodes = [q for q in r.running if q.prefill_left == 0]
        budget = self.cfg.token_budget - len(decodes)
        chunks: list[tuple[Req, int]] = []
        for q in r.running:
            if q.prefill_left and budget > 0:
                take = min(q.prefill_left, budget)
                chunks.append((q, take))
                budget -= take
        tokens = len(decodes) + sum(t for _, t in chunks)
        dt = self.cfg.step_base_s + self.cfg.step_per_token_s * tokens
        r.busy_s += dt
        r.work_tokens += tokens
        self.push(self.now + dt, "step_end", (r, decodes, chunks))

    def step_end(self, r: Replica, decodes: list[Req], chunks: list[tuple[Req, int]]) -> None:
        for q, take in chunks:
            q.prefill_left -= take
            if q.prefill_left == 0:
                q.ttft, q.generated = self.now - q.arrival, 1
                assert q.attempt is not None
                self.fleet.on_first_token(q.attempt)
        for q in decodes:
            q.generated += 1
        done = [
            q
            for q in r.running
            if q.prefill_left == 0 and q.generated >= len(q.answer) * self.cfg.block_tokens
        ]
        for q in done:
            r.running.remove(q)
            self.finish(r, q)
        self.step(r)

    def finish(self, r: Replica, q: Req) -> None:
        bt = self.cfg.block_tokens
        r.pool.release(q.prompt + q.answer)
        hit = q.hit_blocks * bt
        prompt = len(q.prompt) * bt
        assert q.attempt is not None and q.ttft is not None
        self.fleet.on_complete(q.attempt, Usage(prompt - hit, len(q.answer) * bt, hit), ok=True)
        self.fleet.extend(q.attempt, tuple(q.prompt + q.answer))
        if q.arrival >= self.cfg.warmup_s:
            self.records.append((q.ttft, hit, prompt))
            self.traced.append(q)
        s = q.session
        s.stream.extend(q.answer)
        self.push(self.now + s.rng.expovariate(1 / self.cfg.think_mean_s), "turn", s)

    # --- main loop ----------------------------------------------------------------------------

    def working_set_blocks(self) -> int:
        agents = {tuple(s.stream[:1]) for s in self.live.values()}
        return (
            sum(len(s.stream) - s.unique_from for s in self.live.values())
            + len(agents) * self.cfg.system_blocks
        )

    def run(self) -> None:
        t = 0.0
        while t < self.cfg.duration_s:
            t += self.rng.expovariate(self.cfg.session_rate)
            self.push(t, "session", None)
        for s in range(int(self.cfg.duration_s)):
            self.push(float(s), "sample", None)
        if self.cfg.poll_s > 0 and self.strategy not in ORACLES:
            for k in range(int(self.cfg.duration_s / self.cfg.poll_s)):
                self.push(k * self.cfg.poll_s, "poll", None)
        while self.events:
            self.now, _, kind, payload = heapq.heappop(self.events)
            if self.now > self.cfg.duration_s:
                break
            if kind == "session":
                self.start_session(None)
            elif kind == "turn":
                self.next_turn(payload)  # type: ignore[arg-type]
            elif kind == "step":
                self.step(payload)  # type: ignore[arg-type]
            elif kind == "step_end":
                self.step_end(*payload)  # type: ignore[misc]
            elif kind == "poll":
                self.poll()
            elif kind == "sample" and self.now >= self.cfg.warmup_s:
                self.ws_samples.append(self.working_set_blocks())

    def summary(self) -> dict[str, float]:
        ttfts = sorted(t for t, _, _ in self.records)
        hit = sum(h for _, h, _ in self.records)
        prompt = sum(p for _, _, p in self.records)
        busy = [r.busy_s for r in self.replicas]
        work = [r.work_tokens for r in self.replicas]
        cost = sum(busy) / 3600 * self.cfg.replica_usd_per_h
        served = sum(p for _, _, p in self.records) + 0.0
        return {
            "requests": len(ttfts),
            "hit_rate": hit / prompt if prompt else 0.0,
            "hit_tokens": hit,
            "prompt_tokens": prompt,
            "ttft_p50": ttfts[len(ttfts) // 2],
            "ttft_p95": ttfts[int(len(ttfts) * 0.95)],
            "spread_cv": statistics.pstdev(work) / statistics.fmean(work),
            "busy_usd_per_mtok": cost / (served / 1e6) if served else 0.0,
            "working_set": statistics.fmean(self.ws_samples) if self.ws_samples else 0.0,
        }
