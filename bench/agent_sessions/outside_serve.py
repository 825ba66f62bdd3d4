"""The outside replay's system: a real `lantern serve` process with two tenants on the DEFAULT
cache policy, one provider key for both, the provider prompt-cache fake as its upstream over
HTTP, and the official `openai` and `anthropic` SDKs as the clients.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai

from bench._procs import ROOT, free_port, start, stop
from bench.agent_sessions.outside_traces import PREFILL_S_PER_TOKEN, Call
from tests.e2e.harness import write_config, write_policy
from tests.fakes.prompt_cache import Accounting, PromptCacheFake
from tests.fakes.upstream import FakeUpstream

CLAUDE, GPT = "claude-sonnet-4-5", "gpt-4.1"
PROVIDER_KEY = "sk-outside-one-key-for-every-tenant"
KEYS = {"alpha": "lt-outside-alpha-key-0001", "beta": "lt-outside-beta-key-00001"}


@dataclass
class Served:
    """What one session's calls did: the fake's accounting and Lantern's verdict headers."""

    calls: list[Accounting] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)


class OutsideGateway:
    """`lantern serve` in front of the fake; each group gets a fresh provider cache."""

    def __init__(self, var_dir: Path, cache: dict[str, Any] | None = None) -> None:
        """`cache`: both tenants' `cache:` policy section; None (the acceptance run) writes
        none, so both run on the default policy."""
        self.upstream = FakeUpstream(api_key=PROVIDER_KEY).start()
        policies = var_dir / "policies"
        policies.mkdir(parents=True, exist_ok=True)
        for tenant, key in KEYS.items():
            extra = {} if cache is None else {"cache": cache}
            write_policy(policies, tenant, key, models=[CLAUDE, GPT], **extra)
        config = write_config(var_dir / "lantern.yaml", var_dir, _models(self.upstream))
        self.port = free_port()
        argv = [sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(config)]
        env = {"OUTSIDE_PROVIDER_KEY": PROVIDER_KEY, "PYTHONPATH": str(ROOT)}
        try:
            self.proc = start(
                [*argv, "--port", str(self.port)],
                f"{self.url}/healthz",
                env=env,
                log=var_dir / "gateway.log",
            )
        except BaseException:
            self.upstream.stop()
            raise
        self._openai = {
            t: openai.OpenAI(base_url=f"{self.url}/v1", api_key=k, max_retries=0, timeout=120)
            for t, k in KEYS.items()
        }
        self._anthropic = {
            t: anthropic.Anthropic(base_url=self.url, api_key=k, max_retries=0, timeout=120)
            for t, k in KEYS.items()
        }

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def replay(self, group: Sequence[Call]) -> dict[str, Served]:
        """The group's rounds in order, each round's calls at once; the fake names each
        entry's writer by the tenant whose round is in flight."""
        fake = PromptCacheFake(time.monotonic, prefill_s_per_token=PREFILL_S_PER_TOKEN)
        self.upstream.app.cache = fake
        served: dict[str, Served] = {}
        rounds: dict[int, list[Call]] = {}
        for call in group:
            rounds.setdefault(call.round, []).append(call)
        with ThreadPoolExecutor(max_workers=8) as pool:
            for calls in rounds.values():
                tenants = {c.tenant for c in calls}
                sessions = {c.session for c in calls}
                if len(tenants) != 1 or len(sessions) != 1:
                    raise ValueError(f"a round must be one tenant's session: {sessions}")
                fake.principal = calls[0].tenant
                before = len(fake.calls)
                headers = list(pool.map(self._send, calls))
                mine = served.setdefault(calls[0].session, Served())
                mine.calls += fake.calls[before:]
                mine.headers += headers
        return served

    def _send(self, call: Call) -> str:
        """One call through the client's official SDK; returns the x-lantern-cache header."""
        body = dict(call.body)
        if call.door == "anthropic":
            raw: Any = self._anthropic[call.tenant].messages.with_raw_response.create(
                **body, stream=call.stream
            )
        else:
            if call.stream:
                body["stream_options"] = {"include_usage": True}
            raw = self._openai[call.tenant].chat.completions.with_raw_response.create(
                **body, stream=call.stream
            )
        reply = raw.parse()
        if call.stream:
            for _ in reply:  # the whole stream, as an agent reads it
                pass
        return str(raw.headers.get("x-lantern-cache", ""))

    def close(self) -> None:
        stop(self.proc)
        self.upstream.stop()


def _models(upstream: FakeUpstream) -> list[dict[str, Any]]:
    claude = {
        "kind": "anthropic",
        "name": "claude-api",
        "base_url": upstream.base_url,
        "model": CLAUDE,
        "api_key_env": "OUTSIDE_PROVIDER_KEY",
        "timeout_s": 60,
    }
    gpt = {  # an OpenAI-compatible API (`engine` undeclared: other), as OpenAI itself
        "kind": "openai_compatible",
        "name": "openai-api",
        "base_url": upstream.openai_base_url,
        "model": GPT,
        "api_key_env": "OUTSIDE_PROVIDER_KEY",
        "metrics_path": None,
        "timeout_s": 60,
    }
    return [{"name": CLAUDE, "backends": [claude]}, {"name": GPT, "backends": [gpt]}]
