"""The error reply each client expects: OpenAI `{"error": {...}}`, Anthropic
`{"type": "error", "error": {...}}`. Shapes only; which error gets which shape is in errors.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from adapters.types import WireFormat


@dataclass(frozen=True, slots=True)
class HttpError:
    status_code: int
    body: dict[str, object]
    headers: dict[str, str] = field(default_factory=dict)


def error_body(
    wire: WireFormat,
    kind_openai: str,
    kind_anthropic: str,
    message: str,
    rule: str | None,
    param: str | None,
) -> dict[str, object]:
    """`rule` becomes OpenAI's `code` and `param` its `param`; Anthropic carries both in text."""
    if wire == "anthropic":
        return {"type": "error", "error": {"type": kind_anthropic, "message": message}}
    return {"error": {"message": message, "type": kind_openai, "param": param, "code": rule}}
