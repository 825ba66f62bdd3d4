"""What the fake upstream answers a request: its reply planned from the request's last user
text (the markers below: a tool call, a relayed tool result, a word count, an error status, a
broken or slow stream) and the reply as canonical stream events. Deterministic."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import orjson

from adapters.tokens import TokenCounter
from adapters.types import (
    ChatRequest,
    ChatResponse,
    StopReason,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    ToolCallDelta,
    ToolCallStart,
    ToolResultPart,
    ToolUsePart,
)

# one token each in both cl100k_base and o200k_base
VOCAB = ("The", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog")
CALL = re.compile(r"call:([A-Za-z0-9_-]+)")
ARGS = re.compile(r"args:(\{[^}]*\})")  # the tool call's arguments, verbatim
RELAY = "relay:result"  # after a tool's result, the answer is that result's text
WORDS = re.compile(r"words:(\d+)")
STATUS = re.compile(r"status:(\d{3})")  # answer this error status (a fault for this call only)
MIDSTREAM = "error:midstream"  # today mode: the stream ends in the provider's in-band error
MALFORMED = "reply:malformed"  # today mode: a 200 reply that breaks its wire's shape
SLOW = "slow:stream"  # this call's stream chunks come SLOW_CHUNK_S apart
SLOW_CHUNK_S = 0.05


@dataclass(frozen=True)
class Reply:
    content: tuple[TextPart | ToolUsePart, ...]
    stop_reason: StopReason
    output_tokens: int
    stop_sequence: str | None = None


def last_user_text(req: ChatRequest) -> str:
    if not req.messages or req.messages[-1].role != "user":
        return ""
    return "".join(p.text for p in req.messages[-1].content if isinstance(p, TextPart))


def relayed_result(req: ChatRequest) -> str | None:
    """The text of the tool results that end the conversation, when its first user message
    asked for them to be relayed (`relay:result`)."""
    first = next((m for m in req.messages if m.role == "user"), None)
    if first is None or not any(isinstance(p, TextPart) and RELAY in p.text for p in first.content):
        return None
    last = req.messages[-1].content if req.messages else ()
    results = [p for p in last if isinstance(p, ToolResultPart)]
    if not results:
        return None
    return "".join(c.text for r in results for c in r.content if isinstance(c, TextPart))


def plan_reply(req: ChatRequest, counter: TokenCounter, reply_words: int, n: int) -> Reply:
    """Deterministic reply: a tool call when the last user text says `call:<tool>` and that tool
    was offered (arguments `{"text": <the user text>}`, or the JSON object after `args:`); after
    a tool's result, that result's text when the first user text says `relay:result`; else VOCAB
    words cycled (`words:N` in the text overrides the count), cut at `max_tokens` (length) or
    at the first stop sequence (stop_sequence)."""
    relayed = relayed_result(req)
    if relayed is not None:
        tokens = counter.count_text(req.model, relayed)
        return Reply((TextPart(relayed),), "stop", tokens)
    text = last_user_text(req)
    call = CALL.search(text)
    if call and call.group(1) in {t.name for t in req.tools}:
        given = ARGS.search(text)
        args = given.group(1) if given else orjson.dumps({"text": text}).decode()
        output = counter.count_text(req.model, call.group(1)) + counter.count_text(req.model, args)
        return Reply((ToolUsePart(f"call_fake_{n:06d}", call.group(1), args),), "tool_use", output)
    words = WORDS.search(text)
    num_words = int(words.group(1)) if words else reply_words
    enc = counter.encoding(req.model)
    tokens = enc.encode_ordinary(" ".join(itertools.islice(itertools.cycle(VOCAB), num_words)))
    stop: StopReason = "stop"
    if req.max_tokens is not None and len(tokens) > req.max_tokens:
        tokens, stop = tokens[: req.max_tokens], "length"
    reply = enc.decode(tokens)
    for seq in req.stop:
        if seq in reply:
            reply = reply[: reply.index(seq)]
            return Reply((TextPart(reply),), "stop_sequence", len(enc.encode_ordinary(reply)), seq)
    return Reply((TextPart(reply),), stop, len(tokens))


def stream_events(resp: ChatResponse, counter: TokenCounter) -> list[StreamEvent]:
    """The reply as canonical events: one text delta per token, tool arguments in two halves."""
    events: list[StreamEvent] = [StreamStart(resp.id, resp.model)]
    enc = counter.encoding(resp.model)
    for index, part in enumerate(resp.content):
        if isinstance(part, ToolUsePart):
            half = len(part.arguments_json) // 2
            events += [
                ToolCallStart(index, part.id, part.name),
                ToolCallDelta(index, part.arguments_json[:half]),
                ToolCallDelta(index, part.arguments_json[half:]),
            ]
        else:
            events += [TextDelta(index, enc.decode([t])) for t in enc.encode_ordinary(part.text)]
    events.append(StreamEnd(resp.stop_reason, resp.usage, resp.stop_sequence))
    return events
