"""Client identifiers that end up in the ledger or in a header Lantern sends are checked when the
call is built, before anything is reserved or called: at most 256 characters (the ledger's
column), printable ASCII only; a clear 400 naming the field, in the client's format."""

from __future__ import annotations

import orjson
import pytest

from adapters.errors import WireFormatError
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from gateway.core.identifiers import MAX_IDENTIFIER_CHARS, MAX_SAFETY_IDENTIFIER_CHARS
from gateway.core.pipeline import IncomingCall
from gateway.errors import RequestRejected
from gateway.http.errors import to_http
from gateway.ledger.models import UsageRecord
from policies.model import TenantPolicy
from tests.openapi.openai_schema import VENDORED

TENANT = TenantPolicy(tenant="acme")
MESSAGES = [{"role": "user", "content": "hi"}]
BAD = {
    "too_long": "s" * (MAX_IDENTIFIER_CHARS + 1),
    "newline": "abc\ndef",
    "nul": "abc\x00",
    "delete": "abc\x7f",
    "non_ascii": "sess-é",
    "non_latin1": "sess-会话",
}


def _openai(session_header: str | None = None, **fields: object) -> IncomingCall:
    body = {"model": "m", "messages": MESSAGES, **fields}
    request = openai_wire.decode_request(body)
    return IncomingCall("openai", TENANT, "k1", request, body, session_header)


def _anthropic(user_id: str) -> IncomingCall:
    body = {"model": "m", "max_tokens": 5, "messages": MESSAGES, "metadata": {"user_id": user_id}}
    return IncomingCall("anthropic", TENANT, "k1", anthropic_wire.decode_request(body), body)


def test_the_limit_is_the_ledger_column() -> None:
    assert UsageRecord.__table__.c.session_id.type.length == MAX_IDENTIFIER_CHARS


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_session_header_is_a_400_naming_it(case: str) -> None:
    with pytest.raises(RequestRejected) as caught:
        _openai(BAD[case])
    assert (caught.value.rule, caught.value.field) == ("identifier", "x-session-id")
    err = to_http(caught.value, "openai")
    assert err.status_code == 400
    assert err.body["error"]["param"] == "x-session-id"
    assert err.body["error"]["code"] == "identifier"


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_prompt_cache_key_is_a_400_naming_it(case: str) -> None:
    with pytest.raises(RequestRejected) as caught:
        _openai(prompt_cache_key=BAD[case])
    assert caught.value.field == "prompt_cache_key"


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_openai_user_is_a_400_naming_it(case: str) -> None:
    with pytest.raises(RequestRejected) as caught:
        _openai(user=BAD[case])
    assert caught.value.field == "user"


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_openai_safety_identifier_is_a_400_naming_it(case: str) -> None:
    """`safety_identifier` is the end-user id when `user` is absent, and named as itself."""
    with pytest.raises(RequestRejected) as caught:
        _openai(safety_identifier=BAD[case])
    assert caught.value.field == "safety_identifier"


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_safety_identifier_beside_a_user_is_a_400_naming_it(case: str) -> None:
    """Beside a `user` (the end-user id then) a `safety_identifier` is still sent on: checked
    all the same."""
    with pytest.raises(RequestRejected) as caught:
        _openai(user="u-1", safety_identifier=BAD[case])
    assert caught.value.field == "safety_identifier"


@pytest.mark.parametrize("fields", [{}, {"user": "u-1"}])
def test_a_safety_identifier_is_held_to_openais_64_characters(fields: dict[str, str]) -> None:
    """OpenAI's document gives `safety_identifier` a `maxLength` of 64: a longer one is the
    client's 400 at the door, not OpenAI's after the call was admitted."""
    _openai(**fields, safety_identifier="s" * MAX_SAFETY_IDENTIFIER_CHARS)
    with pytest.raises(RequestRejected) as caught:
        _openai(**fields, safety_identifier="s" * (MAX_SAFETY_IDENTIFIER_CHARS + 1))
    assert (caught.value.rule, caught.value.field) == ("identifier", "safety_identifier")
    assert "at most 64 are allowed" in str(caught.value)
    _openai(user="u" * MAX_IDENTIFIER_CHARS)  # `user` keeps the ledger column's 256
    with pytest.raises(WireFormatError):
        _openai(**fields, safety_identifier=7)


def test_the_safety_identifier_limit_is_openais() -> None:
    """The vendored OpenAI document (chat completions and responses share the property)."""
    schemas = orjson.loads(VENDORED.read_bytes())["components"]["schemas"]
    said = schemas["ModelResponseProperties"]["properties"]["safety_identifier"]["anyOf"]
    assert [b["maxLength"] for b in said if b["type"] == "string"] == [MAX_SAFETY_IDENTIFIER_CHARS]


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_anthropic_user_id_is_a_400_in_anthropic_shape(case: str) -> None:
    with pytest.raises(RequestRejected) as caught:
        _anthropic(BAD[case])
    assert caught.value.field == "metadata.user_id"
    err = to_http(caught.value, "anthropic")
    assert err.status_code == 400
    assert err.body["type"] == "error"
    assert err.body["error"]["message"].startswith("metadata.user_id ")


def test_the_messages_say_what_is_wrong() -> None:
    with pytest.raises(RequestRejected) as long:
        _openai(BAD["too_long"])
    assert str(long.value) == "x-session-id has 257 characters; at most 256 are allowed"
    with pytest.raises(RequestRejected) as control:
        _openai(prompt_cache_key=BAD["newline"])
    assert str(control.value) == (
        "prompt_cache_key must be printable ASCII (no control characters, no non-ASCII)"
    )


def test_good_identifiers_pass_up_to_the_limit() -> None:
    longest = "x" * MAX_IDENTIFIER_CHARS
    call = _openai(longest, prompt_cache_key="agent-7/task 3", user=longest)
    assert call.session_header == longest
    assert _anthropic("user_abc_account_0f3e_session_9d2c").request.user is not None
