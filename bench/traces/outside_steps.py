"""The pieces every outside session is made of: the framework's clock, the recorder of calls,
an agent step (tool calls and their outputs), a history edit, a single agent's loop.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.traces.outside_text import Text
from bench.traces.outside_wire import Agent

CLAUDE, GPT = "claude-sonnet-4-5", "gpt-4.1"
CODE_TOOLS = ["Read", "Edit", "Bash", "Grep", "Glob", "Write", "TodoWrite", "WebFetch"]
RESEARCH_TOOLS = ["web_search", "open_url", "read_file", "summarise", "save_note", "search_code"]
SUPPORT_TOOLS = ["lookup_order", "refund_order", "search_kb", "escalate", "send_email"]


class Clock:
    """The session's wall clock as the framework formats it into prompts."""

    def __init__(self, text: Text, num_calls: int) -> None:
        start = datetime(2026, 12, 6, 9, 0, tzinfo=UTC) + timedelta(
            seconds=text.rng.randint(0, 5 * 3600)
        )
        self.times = [start]
        for _ in range(num_calls):
            self.times.append(self.times[-1] + timedelta(seconds=text.rng.uniform(3.0, 40.0)))
        self.ids = [text.uuid() for _ in range(num_calls + 1)]
        self.traces = [text.hex(32) for _ in range(num_calls + 1)]

    def header(self, t: int) -> dict[str, str]:
        now = self.times[t]
        return {
            "iso": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "clock": now.strftime("%H:%M:%S"),
            "clock12": now.strftime("%I:%M %p").lstrip("0"),
            "date": now.strftime("%Y-%m-%d"),
            "long_date": now.strftime("%A, %B %d, %Y"),
            "stamp": now.strftime("%Y-%m-%d %H:%M:%S UTC"),
            "rid": self.ids[t],
            "trace": f"trace_{self.traces[t]}",
        }


class Recorder:
    def __init__(self, group: str) -> None:
        self.group = group
        self.sessions: dict[str, list[dict[str, Any]]] = {}

    def call(
        self, session: str, tenant: str, route: str, agent: Agent, t: int, rnd: int, stream: bool
    ) -> None:
        line = {
            "group": self.group,
            "session": session,
            "tenant": tenant,
            "route": route,
            "round": rnd,
            "stream": stream,
            "body": agent.body(t, stable=False),
            "stable": agent.body(t, stable=True),
        }
        self.sessions.setdefault(session, []).append(line)


def step(agent: Agent, text: Text, t: int, tools: list[str], fan: int = 1) -> None:
    """The model calls `fan` tools at once; the framework answers them."""
    calls = []
    for _ in range(fan):
        name = text.rng.choice(tools)
        calls.append((f"call_{text.hex(24)}", name, text.tool_args(name)))
    agent.act(text.sentence(12) if t % 3 else "", calls)
    agent.observe([(call_id, text.tool_output(name)) for call_id, name, _ in calls])


def truncate_old_results(agent: Agent, keep_last: int) -> None:
    """What a framework does near its context limit: old tool outputs cut to a stub."""
    for m in agent.messages[:-keep_last]:
        if m["role"] == "tool":
            m["results"] = [
                (i, out[:160] + f"\n[... {len(out) - 160} characters truncated ...]")
                if len(out) > 400
                else (i, out)
                for i, out in m["results"]
            ]


def solo(
    rec: Recorder,
    session: str,
    tenant: str,
    route: str,
    agent: Agent,
    text: Text,
    num_calls: int,
    *,
    stream: bool = False,
    edits: dict[int, Callable[[Agent], None]] | None = None,
    tools: list[str] | None = None,
) -> None:
    for t in range(num_calls):
        if edits and t in edits:
            edits[t](agent)
        rec.call(session, tenant, route, agent, t, t, stream)
        if tools:
            step(agent, text, t, tools, fan=2 if t % 5 == 4 else 1)
        else:  # ReAct in plain text: the observation comes back as a user turn
            agent.act(f"Thought: {text.sentence(10)}\nAction: search[{text.ident()}]", [])
            agent.say(f"Observation: {text.tool_output('web_search')}")
