"""Agent traces the cache autopilot must not make dearer than no caching: a timestamped system
prompt, tool-call arguments replayed in a new key order, a history edit at call 10, tool pauses
of 1-20 minutes, a parallel fan-out. The client sets no `cache_control` of its own: Lantern's
default policy decides every marker. Each trace also says what its stable form is (the same
calls with the prefix stable from the first call), which its ideal is worked out on.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.agent_sessions.session import MODEL, SYSTEM, Body, _tools

NUM_CALLS = 20
TOOL_TIME_S = 20.0
RESULT_WORDS = 1400  # ~1,400 tokens of tool output per tool call
EDIT_CALL = 10  # the call at which the agent truncates an old tool result
EDITED_RESULT = 4  # the tool result it truncates (the one call 4 appended)
PAUSE_SEED = 7
PAUSE_RANGE_S = (60.0, 1200.0)  # tool pauses drawn uniformly from 1 to 20 minutes
FAN_OUT = 12  # parallel tool calls per step in the fan-out trace


def _result_text(t: int, k: int, words: int) -> str:
    return f"result {t}.{k}:" + " a" * words


@dataclass
class Trace:
    """One agent's calls: bodies and the gap before each call (the first gap is irrelevant)."""

    name: str
    system: Callable[[int], str] = lambda t: SYSTEM
    fan_out: int = 1
    edit: tuple[int, int] | None = None  # (at call, result of call) truncated from then on
    gaps_s: tuple[float, ...] = ()
    history: list[Body] = field(default_factory=list)
    stable_system: str | None = None  # the system prompt with its changing values taken out
    shuffle_args: bool = False  # the client replays tool-call arguments in a new key order
    task: str = "Fix the failing test."

    def stable(self, body: Body) -> Body:
        """The call as it would be with a prefix stable from the first call."""
        out = dict(body)
        if self.stable_system is not None:
            out["system"] = self.stable_system
        if self.shuffle_args:
            out["messages"] = _sorted_args(body["messages"])
        return out

    def gap_s(self, t: int) -> float:
        return self.gaps_s[t] if self.gaps_s else TOOL_TIME_S

    def body(self, t: int) -> Body:
        if t == 0:
            task = self.task + " b" * 1500
            self.history = [{"role": "user", "content": [{"type": "text", "text": task}]}]
        else:
            self._step(t)
        if self.edit is not None and t == self.edit[0]:
            self._truncate(self.edit[1])
        messages = copy.deepcopy(self.history)
        if self.shuffle_args:
            _shuffle_args(messages, random.Random(t))
        return {
            "model": MODEL,
            "max_tokens": 256,
            "tools": _tools(),
            "system": self.system(t),
            "messages": messages,
        }

    def _step(self, t: int) -> None:
        words = RESULT_WORDS // self.fan_out
        uses = [
            {
                "type": "tool_use",
                "id": f"toolu_{t:03d}_{k:02d}",
                "name": "read_file",
                "input": {"path": f"src/m{t}_{k}.py", "query": "def main", "limit": k + 1},
            }
            for k in range(self.fan_out)
        ]
        results = [
            {
                "type": "tool_result",
                "tool_use_id": use["id"],
                "content": _result_text(t, k, words),
            }
            for k, use in enumerate(uses)
        ]
        text = {"type": "text", "text": f"Step {t}."}
        self.history.append({"role": "assistant", "content": [text, *uses]})
        self.history.append({"role": "user", "content": results})

    def _truncate(self, call: int) -> None:
        """The agent replaces an old tool result by a stub (context trimming)."""
        message = self.history[2 * call]
        for part in message["content"]:
            part["content"] = f"result {call}: [truncated]"


def _tool_uses(messages: list[Body]) -> list[Body]:
    return [
        part
        for m in messages
        if isinstance(m.get("content"), list)
        for part in m["content"]
        if part.get("type") == "tool_use"
    ]


def _shuffle_args(messages: list[Body], rng: random.Random) -> None:
    """A client that keeps tool calls in a map with no stable order (a jsonb round trip)."""
    for use in _tool_uses(messages):
        keys = list(use["input"])
        rng.shuffle(keys)
        use["input"] = {k: use["input"][k] for k in keys}


def _sorted_args(messages: list[Body]) -> list[Body]:
    out = copy.deepcopy(messages)
    for use in _tool_uses(out):
        use["input"] = dict(sorted(use["input"].items()))
    return out


def timestamped() -> Trace:
    """The current time at the head of the system prompt, on every call."""
    return Trace(
        "timestamp in the system prompt",
        system=lambda t: (
            f"Current time: 2026-11-30T09:{t * 3 % 60:02d}:{t * 7 % 60:02d}Z. " + SYSTEM
        ),
        stable_system="Current time: {{volatile:1}}. " + SYSTEM,
    )


def shuffled_args() -> Trace:
    """Tool-call arguments replayed with their keys in a new order on every call."""
    return Trace("tool-call arguments in a new key order", shuffle_args=True)


def history_edit() -> Trace:
    return Trace("old tool result truncated at call 10", edit=(EDIT_CALL, EDITED_RESULT))


def pauses(seed: int = PAUSE_SEED) -> Trace:
    rng = random.Random(seed)
    gaps = tuple(rng.uniform(*PAUSE_RANGE_S) for _ in range(NUM_CALLS))
    return Trace("tool pauses of 1-20 minutes (uniform)", gaps_s=gaps)


def fan_out() -> Trace:
    return Trace(f"parallel fan-out ({FAN_OUT} tool calls a step)", fan_out=FAN_OUT)


def clean() -> Trace:
    return Trace("clean")


def counter(task: str = "Fix the failing test.") -> Trace:
    """A value of no built-in shape (a build counter) at the head of the system prompt."""
    return Trace(
        "build counter in the system prompt",
        system=lambda t: f"Build {48213 + t} of the workspace. " + SYSTEM,
        stable_system="Build {{volatile:1}} of the workspace. " + SYSTEM,
        task=task,
    )


TRACES: tuple[Callable[[], Trace], ...] = (
    clean,
    timestamped,
    shuffled_args,
    counter,
    history_edit,
    pauses,
    fan_out,
)
