"""Client identifiers checked at the door: values a client chooses that Lantern stores in the
ledger or sends in a header (`x-session-id`, `prompt_cache_key`, the user id fields). Each must
fit the ledger's column and be printable ASCII, so that no call is served without its row and
no header carries a control character or a byte HTTP/1.1 cannot take.
"""

from __future__ import annotations

from collections.abc import Mapping

from adapters.types import JSON, ChatRequest, WireFormat
from gateway.errors import RequestRejected

MAX_IDENTIFIER_CHARS = 256  # the ledger's session_id column (gateway/ledger/models.py)


def check_identifiers(
    wire: WireFormat,
    request: ChatRequest,
    session_header: str | None,
    body: Mapping[str, JSON] | None = None,
) -> None:
    """Raise RequestRejected (400, rule `identifier`) naming the first unusable field (the
    end-user id by the field it came in: OpenAI's `user`, else its `safety_identifier`)."""
    user_field = "metadata.user_id" if wire == "anthropic" else "user"
    if wire == "openai" and body is not None and not body.get("user"):
        user_field = "safety_identifier" if body.get("safety_identifier") else "user"
    for field, value in (
        ("x-session-id", session_header),
        ("prompt_cache_key", request.prompt_cache_key),
        ("session_id", request.session_id),
        (user_field, request.user),
    ):
        if value is not None:
            _check(field, value)


def check_identifier(field: str, value: str) -> None:
    """One identifier a door takes outside a chat request (the tool-run door's `x-session-id`),
    checked as `check_identifiers` checks each."""
    _check(field, value)


def _check(field: str, value: str) -> None:
    if len(value) > MAX_IDENTIFIER_CHARS:
        raise RequestRejected(
            f"{field} has {len(value)} characters; at most {MAX_IDENTIFIER_CHARS} are allowed",
            rule="identifier",
            field=field,
        )
    if not (value.isascii() and value.isprintable()):
        raise RequestRejected(
            f"{field} must be printable ASCII (no control characters, no non-ASCII)",
            rule="identifier",
            field=field,
        )
