"""Client identifiers checked at the door: values a client chooses that Lantern stores in the
ledger or sends in a header (`x-session-id`, `prompt_cache_key`, the user id fields). Each must
fit the ledger's column and be printable ASCII, so that no call is served without its row and
no header carries a control character or a byte HTTP/1.1 cannot take.
"""

from __future__ import annotations

from collections.abc import Mapping

from adapters.types import JSON, ChatRequest, WireFormat
from adapters.wire.json_fields import expect
from gateway.errors import RequestRejected

MAX_IDENTIFIER_CHARS = 256  # the ledger's session_id column (gateway/ledger/models.py)
# OpenAI's `safety_identifier` (its OpenAPI document: a string of at most 64 characters); a
# longer one would be refused by OpenAI after the call was admitted and routed
MAX_SAFETY_IDENTIFIER_CHARS = 64


def check_identifiers(
    wire: WireFormat,
    request: ChatRequest,
    session_header: str | None,
    body: Mapping[str, JSON] | None = None,
) -> None:
    """Raise RequestRejected (400, rule `identifier`) naming the first unusable field (the
    end-user id by the field it came in: OpenAI's `user`, else its `safety_identifier`). An
    OpenAI `safety_identifier` is held to OpenAI's 64 characters, also beside a `user`."""
    user_field = "metadata.user_id" if wire == "anthropic" else "user"
    safety = None
    if wire == "openai" and body is not None:
        safety = body.get("safety_identifier")
        if not body.get("user"):
            user_field = "safety_identifier" if safety else "user"
    for field, value in (
        ("x-session-id", session_header),
        ("prompt_cache_key", request.prompt_cache_key),
        ("session_id", request.session_id),
        (user_field, request.user),
    ):
        if value is not None:
            _check(field, value)
    if safety is not None:
        _check_safety_identifier(safety)


def check_identifier(field: str, value: str) -> None:
    """One identifier a door takes outside a chat request (the tool-run door's `x-session-id`),
    checked as `check_identifiers` checks each."""
    _check(field, value)


def _check_safety_identifier(value: JSON) -> None:
    _check(
        "safety_identifier", expect(value, str, "safety_identifier"), MAX_SAFETY_IDENTIFIER_CHARS
    )


def _check(field: str, value: str, max_chars: int = MAX_IDENTIFIER_CHARS) -> None:
    if len(value) > max_chars:
        raise RequestRejected(
            f"{field} has {len(value)} characters; at most {max_chars} are allowed",
            rule="identifier",
            field=field,
        )
    if not (value.isascii() and value.isprintable()):
        raise RequestRejected(
            f"{field} must be printable ASCII (no control characters, no non-ASCII)",
            rule="identifier",
            field=field,
        )
