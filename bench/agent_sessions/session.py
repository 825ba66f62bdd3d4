"""The client's side of the note's 20-call agent session (D1-D2): each call's request body,
padded to 6000 + 1500*t tokens exactly, clean or messy (timestamp, shuffled tools, JSON keys).
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any, Literal

from adapters.tokens import TokenCounter
from adapters.wire import anthropic as anthropic_wire

MODEL = "claude-sonnet-4-5"
NUM_CALLS = 20
FIRST_CONTEXT = 6000
STEP = 1500
Messy = Literal["clean", "timestamp", "shuffled_tools", "json_keys"]
Body = dict[str, Any]


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
