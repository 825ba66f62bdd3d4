"""`lantern cache explain`: the text from recorded diagnoses, and the command over a real SQLite ledger."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.cli.cache_explain import cli_explain, explain_rows, render_explanation
from gateway.ledger.db import create_ledger_engine, migrate_engine, session_factory
from gateway.ledger.models import UsageRecord


def diag(
    call: int,
    reason: str,
    prefix: int,
    expected: int,
    read: int,
    changed: str | None = None,
    gap: float | None = 20.0,
    ttl: str | None = None,
) -> str:
    return json.dumps(
        {
            **({"ttl_choice": {"ttl": ttl}} if ttl else {}),
            "call": call,
            "tenant": "acme",
            "reason": reason,
            "kept": reason == "kept",
            "stable_prefix_tokens": prefix,
            "expected_prefix_tokens": expected,
            "predicted_read_tokens": read,
            "first_changed": changed,
            "gap_s": gap,
        }
    )


ROWS = [
    (datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC), diag(0, "first_call", 6000, 0, 0, gap=None)),
    (datetime(2026, 11, 30, 10, 0, 20, tzinfo=UTC), diag(1, "kept", 7500, 6000, 6000)),
    (
        datetime(2026, 11, 30, 10, 0, 40, tzinfo=UTC),
        diag(2, "system_changed", 9000, 7500, 1200, "system[0]"),
    ),
    (
        datetime(2026, 11, 30, 10, 6, 0, tzinfo=UTC),
        diag(3, "ttl_expired", 10500, 9000, 0, gap=320.0, ttl="1h"),
    ),
    (datetime(2026, 11, 30, 10, 6, 1, tzinfo=UTC), "not json"),
]

EXPECTED = """Session s1: 4 calls; prefix kept on 1 of 3 follow-up calls (33.3 %)

call  time (UTC)           reason             first change     prefix  expected  predicted  reported    gap s  ttl
   0  2026-11-30 10:00:00  first_call         -                  6000         0          0         -        -    -
   1  2026-11-30 10:00:20  kept               -                  7500      6000       6000         -     20.0    -
   2  2026-11-30 10:00:40  system_changed     system[0]          9000      7500       1200         -     20.0    -
   3  2026-11-30 10:06:00  ttl_expired        -                 10500      9000          0         -    320.0   1h

predicted: cache reads the gateway expected; reported: the cache reads the backend reported; ttl: the lifetime the autopilot chose

Breaks:
  call 2 at system[0]: system changed; 1200 of 7500 cached tokens still usable. the system prompt changed: move dates and ids out of it (cache.normalise.relocate_volatile) or send updates as messages
  call 3: ttl expired; 0 of 9000 cached tokens still usable. the gap exceeded the cache lifetime: a slow tool outlived it (cache.ttl: auto, the default, moves a session with long pauses to 1 h once it pays)
"""


def test_render_golden() -> None:
    assert render_explanation("s1", explain_rows(ROWS)) == EXPECTED


def test_empty_session() -> None:
    assert render_explanation("nope", []) == "No cache diagnoses recorded for session nope.\n"


ZEROS = {
    "input_tokens": 0,
    "cache_read_tokens": 0,
    "cache_write_tokens": 0,
    "output_tokens": 0,
    "cost_usd": 0,
    "uncached_cost_usd": 0,
    "latency_ms": 0.0,
}


@dataclass(frozen=True)
class LedgerSettings:
    database_url: str


REPORTED = [0, 5800, 1100, 0]  # the cache reads the backend reported for each call


def test_cli_explain_reads_the_ledger(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = create_ledger_engine(url)
    migrate_engine(engine)
    with session_factory(engine).begin() as session:
        for i, ((ts, text), reads) in enumerate(zip(ROWS[:4], REPORTED, strict=True)):
            session.add(
                UsageRecord(
                    id=f"r{i}",
                    ts=ts,
                    tenant="acme",
                    key_id="k",
                    model="m",
                    request_id=f"q{i}",
                    status="ok",
                    session_id="s1",
                    attempt=0,
                    cache_diagnosis=text,
                    **{**ZEROS, "cache_read_tokens": reads},
                )
            )
        for session_id in ("s1", "s2"):
            session.add(
                UsageRecord(
                    id=f"other-{session_id}",
                    ts=ROWS[0][0],
                    tenant="globex",
                    key_id="k",
                    model="m",
                    request_id=f"x-{session_id}",
                    status="ok",
                    session_id=session_id,
                    attempt=0,
                    cache_diagnosis=diag(0, "first_call", 1, 0, 0),
                    **ZEROS,
                )
            )
    engine.dispose()
    args = argparse.Namespace(session="s1", tenant="acme", config=None)
    assert cli_explain(args, LedgerSettings(url)) == 0
    out = capsys.readouterr().out
    # the backend's reported reads stand beside the gateway's prediction and the autopilot's ttl
    assert (
        "   1  2026-11-30 10:00:20  kept" in out
        and "6000       6000      5800     20.0    -" in out
    )
    assert "1200      1100     20.0    -" in out and "0         0    320.0   1h" in out
    reported = [(ts, text, reads) for (ts, text), reads in zip(ROWS[:4], REPORTED, strict=True)]
    assert out == render_explanation("s1", explain_rows(reported)) + (
        "\nCache P&L (USD): saved 0.000000, write premiums 0.000000 (unread 0.000000), "
        "net 0.000000\nLost to breaks: 0.000000 (-); lifetimes chosen: 1h x1\n"
    )
    # --tenant is needed only when several tenants used the session id
    assert cli_explain(argparse.Namespace(session="s1", tenant=None), LedgerSettings(url)) == 2
    assert "pass --tenant with one of: acme, globex" in capsys.readouterr().err
    assert cli_explain(argparse.Namespace(session="s2", tenant=None), LedgerSettings(url)) == 0
    assert "Session s2: 1 calls" in capsys.readouterr().out


def test_explain_shows_what_the_autopilot_did_and_saved() -> None:
    def acted(call: int, reason: str, autopilot: dict) -> str:
        body = json.loads(diag(call, reason, 6000, 6000 if call else 0, 6000 if call else 0))
        return json.dumps({**body, "autopilot": autopilot})

    at = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
    rows = [
        (at, acted(0, "first_call", {"relocated": ["iso_datetime"], "tool_args": 0})),
        (
            at,
            acted(
                1,
                "kept",
                {
                    "relocated": ["iso_datetime", "learned"],
                    "tool_args": 2,
                    "saved_tokens": 6000,
                    "saved_usd": 0.0162,
                },
            ),
        ),
        (
            at,
            acted(
                2,
                "kept",
                {"relocated": [], "fanout_wait_ms": 412, "saved_tokens": 6000, "saved_usd": 0.0207},
            ),
        ),
        (at, diag(3, "kept", 6000, 6000, 6000)),
    ]
    text = render_explanation("s1", explain_rows(rows))
    assert text.split("Autopilot:\n", 1)[1] == (
        "  call 0: relocated iso_datetime\n"
        "  call 1: relocated iso_datetime,learned; tool args 2; saved 0.016200 (6000 tokens)\n"
        "  call 2: waited 412 ms for a fan-out's first write; saved 0.020700 (6000 tokens)\n"
    )
