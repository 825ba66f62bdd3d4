"""Agent traffic on the bundled engine, from outside (issue 39's "How it is shown"): a real gateway
in front of the engine (CPU, the default SmolLM2-135M), the openai SDK sending a seeded mix of
forced tool calls (schemas with and without `additionalProperties: false`), `tool_choice:
required`, `json_schema`, `json_object`, penalties and logit bias, at temperatures 0 and 1 with
seeds, streamed and not, 8 at a time. Checks every call: no 5xx; a call that ends `tool_calls` or
`stop` carries JSON that parses and validates; one cut at `length` claims no tool call; the
gateway's reservation is the engine's prompt count plus `max_tokens` and the settle stays within
it; the ledger row has the engine's counts; the gateway logs no overrun.

    python -m bench.engine_agent_traffic [--calls 200] [--concurrency 8] [--seed 39]

`tests/e2e/test_engine_agent_traffic.py` runs a 48-call sample of the same mix.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import openai
from prometheus_client import CollectorRegistry
from sqlalchemy import create_engine, text

from bench._procs import free_port, start, stop
from bench.engine_agent_calls import KINDS, CallSpec, Outcome, check_outcome, make_calls
from gateway.core.admission import Admission, AdmissionMetrics
from tests.adversarial.recording_store import RecordingStore
from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy

KEY = "lt-acme-agent-traffic-key-0000000000001"
MODEL = "smollm2"
OVERRUN = "beyond its reservation"
ENGINE_START_S = 900


class LogTap(logging.Handler):
    """The gateway's log records at WARNING and above (it runs in this process)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.name}: {record.getMessage()}")


@dataclass
class Stack:
    gateway: RunningGateway
    store: RecordingStore
    log: LogTap


@contextmanager
def bundled_engine(var_dir: Path) -> Iterator[str]:
    """The bundled engine as users start it (CPU, bf16, its kernels), its log in `var_dir`;
    yields its base URL. Start-up is generous: the kernels may compile on a busy machine."""
    port = free_port()
    argv = [sys.executable, "-m", "selfhost", "--model", "default", "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    proc = start(argv, f"{url}/health", timeout_s=ENGINE_START_S, log=var_dir / "engine.log")
    try:
        yield url
    finally:
        stop(proc)


@contextmanager
def engine_gateway(var_dir: Path, engine_url: str) -> Iterator[Stack]:
    """The gateway in this process in front of the engine at `engine_url`, a quota store that
    records each hold and settle, and a tap on the gateway's log."""
    store = RecordingStore()
    original = Admission.from_settings
    Admission.from_settings = classmethod(  # type: ignore[method-assign,assignment]
        lambda cls, settings, registry=None: cls(
            store, metrics=AdmissionMetrics(CollectorRegistry())
        )
    )
    (var_dir / "policies").mkdir(parents=True, exist_ok=True)
    # the calls wait their turn however slow the CPU engine is: this run is about what the
    # engine answers, not the fair queue's shedding (a 429 past the default 5 s of queueing)
    write_policy(var_dir / "policies", "acme", KEY, routing={"max_queue_ms": 600_000})
    backend = {
        "kind": "selfhost",
        "name": "smollm2-local",
        "base_url": f"{engine_url}/v1",
        "model": MODEL,
        "timeout_s": 600,
    }
    config = write_config(
        var_dir / "lantern.yaml",
        var_dir,
        [{"name": MODEL, "backends": [backend]}],
        prices={MODEL: {"input": 0.02, "output": 0.04}},
    )
    tap = LogTap()
    logging.getLogger().addHandler(tap)
    try:
        gateway = start_gateway(config)
    finally:
        Admission.from_settings = original  # type: ignore[method-assign]
    try:
        yield Stack(gateway, store, tap)
    finally:
        gateway.stop()
        logging.getLogger().removeHandler(tap)


async def _one(client: openai.AsyncOpenAI, spec: CallSpec) -> Outcome:
    headers = {"x-session-id": spec.session}
    try:
        if spec.stream:
            return await _streamed(client, spec, headers)
        reply = await client.chat.completions.create(
            **spec.body, model=MODEL, extra_headers=headers
        )
    except openai.APIStatusError as exc:
        return Outcome(spec, status=exc.status_code, error=str(exc)[:300])
    choice = reply.choices[0]
    calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
    usage = reply.usage
    assert usage is not None
    return Outcome(
        spec, 200, choice.finish_reason, choice.message.content or "", calls,
        usage.prompt_tokens, usage.completion_tokens,
    )  # fmt: skip


async def _streamed(client: openai.AsyncOpenAI, spec: CallSpec, headers: dict[str, str]) -> Outcome:
    try:
        stream = await client.chat.completions.create(
            **spec.body,
            model=MODEL,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=headers,
        )
        content, finish, usage = [], None, None
        calls: dict[int, list[str]] = {}
        async for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                content.append(choice.delta.content or "")
                for call in choice.delta.tool_calls or []:
                    entry = calls.setdefault(call.index, ["", ""])
                    entry[0] += (call.function and call.function.name) or ""
                    entry[1] += (call.function and call.function.arguments) or ""
    except openai.APIStatusError as exc:
        return Outcome(spec, status=exc.status_code, error=str(exc)[:300])
    if usage is None:
        return Outcome(spec, 200, finish, "".join(content), error="stream without usage")
    pairs = [(name, args) for name, args in calls.values()]
    return Outcome(
        spec, 200, finish, "".join(content), pairs, usage.prompt_tokens, usage.completion_tokens
    )


async def drive(url: str, specs: list[CallSpec], concurrency: int) -> list[Outcome]:
    """Every call, at most `concurrency` in flight; outcomes in the order of `specs`."""
    gate = asyncio.Semaphore(concurrency)
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=600)

    async def bounded(spec: CallSpec) -> Outcome:
        async with gate:
            return await _one(client, spec)

    try:
        return list(await asyncio.gather(*(bounded(s) for s in specs)))
    finally:
        await client.close()


@dataclass
class Report:
    outcomes: list[Outcome]
    problems: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def summary(self) -> str:
        kinds = Counter((o.spec.kind, o.finish) for o in self.outcomes)
        lines = [f"{len(self.outcomes)} calls in {self.wall_s:.1f} s"]
        lines += [f"  {kind:<14} {finish}: {n}" for (kind, finish), n in sorted(kinds.items())]
        lines.append(f"problems: {len(self.problems)}")
        return "\n".join(lines + [f"  {p}" for p in self.problems])


def ledger_counts(database_url: str, sessions: set[str]) -> dict[str, tuple[int, int]]:
    """session id -> (prompt tokens, output tokens) of its ledger row, once every one of
    `sessions` has its row (rows are written after the replies)."""
    engine = create_engine(database_url)
    deadline = time.monotonic() + 30
    query = text("SELECT session_id, input_tokens + cache_read_tokens, output_tokens FROM usage")
    try:
        while True:
            with engine.connect() as conn:
                rows = {str(s): (int(p), int(o)) for s, p, o in conn.execute(query)}
            if sessions <= rows.keys() or time.monotonic() > deadline:
                return rows
            time.sleep(0.2)
    finally:
        engine.dispose()


def run(var_dir: Path, calls: int, concurrency: int, seed: int) -> Report:
    specs = make_calls(random.Random(seed), calls)
    with bundled_engine(var_dir) as engine_url, engine_gateway(var_dir, engine_url) as stack:
        started = time.monotonic()
        outcomes = asyncio.run(drive(stack.gateway.url, specs, concurrency))
        wall_s = time.monotonic() - started
        ledger = ledger_counts(stack.gateway.settings.database_url, {s.session for s in specs})
        report = Report(outcomes, wall_s=wall_s)
        for outcome in outcomes:
            report.problems += check_outcome(outcome, ledger.get(outcome.spec.session))
        report.problems += check_holds(stack.store, outcomes)
        report.problems += [r for r in stack.log.records if OVERRUN in r]
    return report


def check_holds(store: RecordingStore, outcomes: list[Outcome]) -> list[str]:
    """Each call's hold is the engine's prompt count plus its `max_tokens`, and its settle the
    engine's prompt plus output, matched as (hold, settled) pairs over all calls."""
    expected: Counter[tuple[int, int | None]] = Counter(
        (o.prompt_tokens + o.spec.max_tokens, o.prompt_tokens + o.completion_tokens)
        for o in outcomes
        if o.status == 200
    )
    held = Counter((h.hold_tokens, h.settled_tokens) for h in store.held.values())
    problems = [f"hold/settle {pair} x{n}: no call" for pair, n in (held - expected).items()]
    problems += [f"call {pair} x{n}: no such hold" for pair, n in (expected - held).items()]
    problems += [
        f"settled {h.settled_tokens} > held {h.hold_tokens}"
        for h in store.held.values()
        if h.settled_tokens is not None and h.settled_tokens > h.hold_tokens
    ]
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seed", type=int, default=39)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = run(Path(tmp), args.calls, args.concurrency, args.seed)
    print(f"kinds: {', '.join(KINDS)}")
    print(report.summary())


if __name__ == "__main__":
    main()
