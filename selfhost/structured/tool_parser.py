"""Tool calls parsed back out of generated text, incrementally: text outside the call tags is
content, each `<tool_call>{"name": N, "arguments": A}</tool_call>` becomes an OpenAI tool call
whose arguments stream as they are generated. Streaming and whole-text parsing are one code path,
so the streamed argument deltas concatenate to exactly the final arguments.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

from selfhost.structured.tool_format import CALL_CLOSE, CALL_OPEN

OPEN_TAG = CALL_OPEN.strip()
CLOSE_TAG = CALL_CLOSE.strip()
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*')


@dataclass(frozen=True)
class CallDelta:
    """A piece of tool call `index`: its id and name the first time, then argument text."""

    index: int
    arguments: str
    call_id: str | None = None
    name: str | None = None


@dataclass
class ToolCall:
    call_id: str
    name: str
    arguments: str


@dataclass
class ToolCallParser:
    content: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    _pending: str = ""  # text not yet classified
    _in_call: bool = False  # inside the call tags
    _started: bool = False  # the current call's name is out
    _emitted_args: int = 0  # characters of the current call's arguments already out

    def feed(self, text: str) -> tuple[str, list[CallDelta]]:
        """New text in; the content and call deltas that are now final out."""
        self._pending += text
        content: list[str] = []
        deltas: list[CallDelta] = []
        while True:
            if not self._in_call:
                start = self._pending.find(OPEN_TAG)
                if start < 0:
                    keep = _partial_suffix(self._pending, OPEN_TAG)
                    content.append(self._take(len(self._pending) - keep))
                    break
                content.append(self._take(start))
                self._pending = self._pending[len(OPEN_TAG) :]
                self._in_call = True
                continue
            end = _find_outside_strings(self._pending, CLOSE_TAG)
            if end < 0:
                deltas += self._call_progress(self._pending, closed=False)
                break
            deltas += self._call_progress(self._pending[:end], closed=True)
            self._pending = self._pending[end + len(CLOSE_TAG) :]
            self._in_call = False
        new = "".join(content)
        self.content += new
        return new, deltas

    def finish(self) -> tuple[str, list[CallDelta]]:
        """End of generation: an unclosed call whose name is out (or whose JSON is whole) is
        closed; anything else left is text."""
        rest, self._pending = self._pending, ""
        if self._in_call:
            self._in_call = False
            if self._started or _complete_call(rest) is not None:
                return "", self._call_progress(rest, closed=True)
            rest = OPEN_TAG + rest
        self.content += rest
        return rest, []

    def _take(self, size: int) -> str:
        taken, self._pending = self._pending[:size], self._pending[size:]
        return taken

    def _call_progress(self, body: str, closed: bool) -> list[CallDelta]:
        head = _HEAD.match(body)
        if head is None:
            return self._whole_call(body) if closed else []
        deltas: list[CallDelta] = []
        if not self._started:
            name = str(json.loads(head.group(1)))
            self.calls.append(ToolCall(_call_id(), name, ""))
            self._started, self._emitted_args = True, 0
            deltas.append(CallDelta(len(self.calls) - 1, "", self.calls[-1].call_id, name))
        arguments = body[head.end() :]
        final = _arguments_end(arguments, closed)
        if final > self._emitted_args:
            piece = arguments[self._emitted_args : final]
            self.calls[-1].arguments += piece
            self._emitted_args = final
            deltas.append(CallDelta(len(self.calls) - 1, piece))
        if closed:
            self._started = False
        return deltas

    def _whole_call(self, body: str) -> list[CallDelta]:
        """A closed call not in the streaming shape (e.g. "arguments" first): parsed whole."""
        parsed = _complete_call(body)
        if parsed is None:
            self.content += OPEN_TAG + body + CLOSE_TAG
            return []
        name, arguments = parsed
        self.calls.append(ToolCall(_call_id(), name, arguments))
        index = len(self.calls) - 1
        return [CallDelta(index, arguments, self.calls[index].call_id, name)]


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _arguments_end(arguments: str, closed: bool) -> int:
    """How much of the text after `"arguments":` is surely arguments. Closed: all but the call
    object's closing brace. Open: all but the last brace and what follows it while that could
    still be the call's end, and all but trailing whitespace otherwise."""
    if closed:
        text = arguments.rstrip()
        return len(text[:-1].rstrip()) if text.endswith("}") else len(text)
    last = arguments.rfind("}")
    if last >= 0 and CLOSE_TAG.startswith(arguments[last + 1 :].strip()):
        return len(arguments[:last].rstrip())
    return len(arguments.rstrip())


def _find_outside_strings(body: str, tag: str) -> int:
    """The first `tag` in a call's body that is not inside a JSON string (an argument may say
    `</tool_call>`), or -1."""
    in_string = escaped = False
    for index, char in enumerate(body):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif body.startswith(tag, index):
            return index
    return -1


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


def _complete_call(body: str) -> tuple[str, str] | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    return value["name"], arguments if isinstance(arguments, str) else json.dumps(arguments)
