"""The cache autopilot's traces (bench/agent_sessions/traces.py) through Lantern's prompt port
with the DEFAULT policy: never dearer than no caching, within 1 point of each trace's ideal
(worked out by an oracle over the provider fake's own view, not by the gateway), and the
note's D2 table still reproduced."""

from __future__ import annotations

import orjson
import pytest

from bench.agent_sessions import NORMALISED, NOTE_TABLE, InProcessLantern, fresh, miss_calls
from bench.agent_sessions import run_session as run_note_session
from bench.agent_sessions.autopilot import PortHop, TraceResult, run_trace
from bench.agent_sessions.hops import Clock
from bench.agent_sessions.traces import (
    EDIT_CALL,
    clean,
    counter,
    fan_out,
    history_edit,
    pauses,
    shuffled_args,
    timestamped,
)
from policies.model import TenantPolicy


def _within_ideal(result: TraceResult) -> None:
    assert result.cost <= result.uncached, result.name  # no dearer than no caching
    assert abs(result.percent - result.ideal_percent) <= 1.0, (result.percent, result.ideal)


def test_timestamped_system_prompt_is_relocated_from_the_first_call() -> None:
    result = run_trace(timestamped())
    _within_ideal(result)
    assert result.verdicts() == "kept x19"
    assert (
        result.headers[0] == "first_call; relocated=iso_datetime; prefix=3075; expected=0; read=0"
    )
    assert result.headers[1] == (
        "kept; relocated=iso_datetime; tool_args=1; prefix=4506; expected=3075; read=3075"
    )
    assert orjson.loads(result.diagnoses[1])["autopilot"] == {
        "relocated": ["iso_datetime"],
        "tool_args": 1,
    }


def test_tool_args_in_a_new_key_order_keep_the_prefix() -> None:
    result = run_trace(shuffled_args())
    _within_ideal(result)
    assert result.verdicts() == "kept x19"


def test_a_value_of_no_known_shape_is_learnt_and_remembered_for_the_tenant() -> None:
    hop = PortHop(Clock())
    result = run_trace(counter(), hop=hop)
    _within_ideal(result)  # the session that teaches the place, too
    # call 1 teaches the place and keeps call 0's value in it: the prefix is read, not written
    assert result.verdicts() == "kept x19"
    assert result.headers[1].startswith("kept; relocated=learned; ")
    assert {c.write for c in result.calls[1:]} == {1439}  # only the new turn, every call
    later = run_trace(counter("Review the open pull request."), hop=hop)
    _within_ideal(later)  # the tenant's next session is relocated from its first call
    assert later.verdicts() == "kept x19"
    assert later.headers[0].startswith("first_call; relocated=learned; ")
    other = PortHop(hop.clock, TenantPolicy(tenant="globex"))
    other.port = hop.port  # the same gateway process: another tenant learns for itself
    first = run_trace(counter(), hop=other)
    assert first.headers[0].startswith("first_call; prefix=")


def test_every_value_of_a_learnt_place_still_reaches_the_model() -> None:
    hop, trace = PortHop(Clock()), counter()
    sent = []
    for t in range(3):
        hop.clock.now_s += 20
        body, _, _ = hop.send(trace.body(t))
        sent.append(orjson.dumps(body).decode())
    # the teaching session keeps call 0's value in place and names the newest one at the tail
    assert all("Build 48213 of the workspace." in s for s in sent)
    assert 'in \\"Build 48213 of the workspace. You a\\", 48213 is now 48214' in sent[1]
    assert 'in \\"Build 48213 of the workspace. You a\\", 48213 is now 48215' in sent[2]
    later = counter("Review the open pull request.")
    for t in range(2):
        body, _, _ = hop.send(later.body(t))
        text = orjson.dumps(body).decode()
        assert "Build {{volatile:1}} of the workspace." in text  # relocated from the start
        assert f"{{{{volatile:1}}}} = {48213 + t}" in text


def test_with_relocation_never_a_timestamp_pays_no_premium_and_names_the_block() -> None:
    never = TenantPolicy.model_validate(
        {"tenant": "acme", "cache": {"normalise": {"relocate_volatile": "never"}}}
    )
    result = run_trace(timestamped(), never)
    assert result.cost <= result.uncached
    assert result.percent == pytest.approx(100.0, abs=0.01)
    assert [(c.read, c.write) for c in result.calls] == [(0, 0)] * 20  # no write nobody reads
    assert result.verdicts() == "volatile_block x19"  # one session, not 20 first calls
    assert result.headers[1] == (
        "volatile_block; block=system[0]; pattern=iso_datetime; advice=relocate_volatile; "
        "tool_args=1; prefix=4515; expected=0; read=0"
    )
    assert orjson.loads(result.diagnoses[1])["volatile"] == {
        "block": "system[0]",
        "pattern": "iso_datetime",
    }


def test_history_edit_reads_what_came_before_the_edited_block() -> None:
    result = run_trace(history_edit())
    _within_ideal(result)
    edited = result.calls[EDIT_CALL]
    # the entry call 3 left at its end (before result 4, the edited one) is reached by a
    # stepping stone; the conversation marker alone looks back only 20 blocks
    assert (edited.read, edited.write) == (7387, 8675)
    assert result.headers[EDIT_CALL].startswith("history_rewritten; block=messages[8][0]")


def test_pauses_of_1_to_20_minutes_pick_1h_once_it_pays() -> None:
    result = run_trace(pauses())
    _within_ideal(result)
    assert result.ttls == ("5m",) + ("1h",) * 19
    choices = [orjson.loads(d)["ttl_choice"] for d in result.diagnoses]
    for choice in choices:  # 1 h exactly when the expected saving pays the extra write
        assert (choice["ttl"] == "1h") == (choice["saving"] > choice["premium"] > 0)
    assert [c.write_1h > 0 for c in result.calls] == [False] + [True] * 19


def test_clean_session_and_fan_out_stay_at_5_minutes() -> None:
    for trace in (clean(), fan_out()):
        result = run_trace(trace)
        _within_ideal(result)
        assert set(result.ttls) == {"5m"}
        assert result.verdicts() == "kept x19"


@pytest.mark.parametrize("num_misses", [0, 2, 19])
def test_the_note_table_still_reproduces(num_misses: int) -> None:
    result = run_note_session(
        "t", "clean", *fresh(InProcessLantern.factory(NORMALISED)), miss_calls(num_misses)
    )
    assert round(result.percent, 1) == NOTE_TABLE[num_misses]
