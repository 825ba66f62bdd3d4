"""How many leading prompt tokens of a chat request are public: shared across cache salts.

The gateway names the declared-public head of a request (`lantern_public`: its first `tools`
tools and first `system` system text parts); the engine finds where that head ends in *its own*
rendering and tokenisation. Every other string of the request (later system parts, every
message, every other tool) is rendered a second time with a sentinel in front; the two renders
agree up to the first character that depends on private content, and only the tokens of that
common text (tokenised alone, so no token borrows a character of what follows) are public. The
block hashing then leaves the full 16-token blocks inside that count unsalted; a block that
straddles the end stays salted, so private text never hashes without its salt.

Pure functions over the request's JSON; the service supplies the renderer and the tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SENTINEL = "\ue000\u2063"  # a private-use character and an invisible separator: in no template


class PublicHead(BaseModel):
    """`lantern_public`: the declared-public head, in the gateway's canonical order."""

    model_config = ConfigDict(extra="forbid")

    tools: int = Field(default=0, ge=0)
    system: int = Field(default=0, ge=0)


def marked_request(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], head: PublicHead
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The messages and tools with the sentinel in front of every string outside the head."""
    marked_tools = [tool if i < head.tools else _marked_tool(tool) for i, tool in enumerate(tools)]
    out: list[dict[str, Any]] = []
    public_left = head.system
    leading = True
    for message in messages:
        leading = leading and message.get("role") in ("system", "developer")
        if leading:
            content, public_left = _marked_system(message.get("content"), public_left)
            out.append({**message, "content": content})
        else:
            out.append(_marked_message(message))
    return out, marked_tools


def public_token_count(
    prompt: Sequence[int], text: str, marked_text: str, encode: Callable[[str], list[int]]
) -> int:
    """Tokens of `prompt` (the encoding of `text`) that lie inside the text `text` shares with
    `marked_text`, tokenised on its own."""
    common = 0
    for a, b in zip(text, marked_text, strict=False):
        if a != b:
            break
        common += 1
    head_ids = encode(text[:common])
    same = 0
    for a_id, b_id in zip(prompt, head_ids, strict=False):
        if a_id != b_id:
            break
        same += 1
    return same


def _mark(value: Any) -> Any:
    return SENTINEL + value if isinstance(value, str) else SENTINEL


def _marked_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = dict(tool.get("function") or {})
    function["name"] = _mark(function.get("name"))
    if "description" in function:
        function["description"] = _mark(function["description"])
    function["parameters"] = {SENTINEL: _mark(str(function.get("parameters")))}
    return {**tool, "function": function}


def _marked_system(content: Any, public_left: int) -> tuple[Any, int]:
    """A leading system message's content with its parts past the public count marked; the
    public count left for the next one. A string is one part; a list counts its text parts."""
    if not isinstance(content, list):
        if public_left > 0:
            return content, public_left - 1
        return _mark(content), 0
    parts = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text":
            if public_left > 0:
                public_left -= 1
                parts.append(part)
                continue
            parts.append({**part, "text": _mark(part.get("text"))})
        else:
            parts.append(part)
    return parts, public_left


def _marked_message(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        marked: Any = [
            {**p, "text": _mark(p.get("text"))} if isinstance(p, dict) else p for p in content
        ]
    else:
        marked = _mark(content)
    return {**message, "content": marked}
