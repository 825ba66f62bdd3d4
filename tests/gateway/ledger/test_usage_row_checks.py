"""The row's cheap checks refuse what the full ones refused: money from floats, the row id, and
a diagnosis the gateway marked as its own JSON (`JsonText`), whose size alone is checked."""

from __future__ import annotations

import dataclasses
import random
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from types import SimpleNamespace

import pytest
import sqlalchemy as sa

from gateway.ledger import models
from gateway.ledger.call_ledger import ROW_ID_NAMESPACE, CallLedger, usage_row, usage_row_id
from gateway.ledger.models import MAX_DIAGNOSIS_BYTES, JsonText, UsageRow, to_money
from gateway.ledger.usage_insert import insert_rows
from tests.gateway.ledger.test_call_ledger import CALL, NOW, ListSink


def reference_money(value: float) -> Decimal:
    """What `to_money` made of a float before its fast path: its str, checked, quantized."""
    exact = Decimal(str(value))
    assert exact.is_finite() and 0 <= exact < Decimal(10) ** 10
    return exact.quantize(Decimal("0.00000001"))


def test_money_from_floats_is_the_reference_decimal_to_the_digit() -> None:
    rng = random.Random(40)
    floats = [0.0, -0.0, 5e-9, 1.5e-8, 2.5e-8, 0.002715, 9999999999.999998, 1e10 - 1e-6]
    floats += [rng.uniform(0, 10) * 10 ** rng.randint(-9, 9) for _ in range(5000)]
    for value in floats:
        money = to_money(value)
        assert str(money) == str(reference_money(value)), value


@pytest.mark.parametrize("value", [-0.01, 1e10, float("nan"), float("inf"), float("-inf")])
def test_money_out_of_range_is_still_refused(value: float) -> None:
    with pytest.raises(ValueError):
        to_money(value)


def test_the_row_id_is_uuid5_of_request_and_attempt() -> None:
    for name in ["req-42", "é/中文", "x" * 300, uuid.uuid4().hex]:
        for attempt in (0, 1, 7):
            expected = uuid.uuid5(ROW_ID_NAMESPACE, f"{name}/{attempt}")
            assert usage_row_id(name, attempt) == str(expected)


def test_a_gateway_diagnosis_makes_the_same_row_as_plain_text() -> None:
    text = '{"verdict":"miss","blocks":[{"name":"système","tokens":1200}]}'
    marked = usage_row(replace(CALL, cache_diagnosis=JsonText(text)), NOW)
    plain = usage_row(replace(CALL, cache_diagnosis=text), NOW)
    assert marked == plain
    assert marked.to_line() == plain.to_line()
    assert UsageRow.from_json(marked.to_json()) == plain


@pytest.mark.parametrize(
    "text",
    [
        '"' + "x" * MAX_DIAGNOSIS_BYTES + '"',
        '"' + "é" * (MAX_DIAGNOSIS_BYTES // 2) + '"',  # under the bound in characters, not bytes
    ],
)
def test_an_oversized_diagnosis_is_refused_marked_or_not(text: str) -> None:
    for diagnosis in (text, JsonText(text)):
        with pytest.raises(ValueError, match="over 8192 bytes"):
            usage_row(replace(CALL, cache_diagnosis=diagnosis), NOW)
    sink = ListSink()
    CallLedger(sink, lambda: NOW).record(replace(CALL, cache_diagnosis=JsonText(text)))
    assert [(r.request_id, r.cache_diagnosis) for r in sink.rows] == [("req-42", None)]


@pytest.mark.parametrize(
    "text", ["not json", '{"a":1', '{"a":"\x00"}', "\x00", '{"a":1}\x00', '{"a":"\udc80"}x']
)
def test_outside_text_is_still_parsed_and_refused(text: str) -> None:
    with pytest.raises(ValueError):
        usage_row(replace(CALL, cache_diagnosis=text), NOW)


def test_a_marked_diagnosis_is_stored_as_text(engine) -> None:
    text = '{"verdict":"hit","tokens":6000}'
    insert_rows(engine, [usage_row(replace(CALL, cache_diagnosis=JsonText(text)), NOW)])
    with engine.connect() as connection:
        stored = connection.execute(sa.text("SELECT cache_diagnosis FROM usage")).scalar_one()
    assert stored == text and type(stored) is str


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("tenant", "ac\x00me", "UsageRow.tenant must be text without NUL characters"),
        ("session_id", "s" * 257, "UsageRow.session_id is longer than 256 characters"),
        ("attempt", 2**31, "UsageRow.attempt must be an integer in [0, 2147483648)"),
        ("latency_ms", float("inf"), "UsageRow.latency_ms must be a finite number >= 0"),
        ("queue_ms", -1.0, "UsageRow.queue_ms must be a finite number >= 0"),
        ("status", "exploded", "UsageRow.status must be one of"),
    ],
)
def test_each_refused_kind_is_refused_from_a_call_record(field, value, message) -> None:
    with pytest.raises(ValueError) as raised:
        usage_row(replace(CALL, **{field: value}), NOW)
    assert str(raised.value).startswith(message)


def test_a_call_records_money_exactly() -> None:
    row = usage_row(replace(CALL, cache_saved_usd=-1.5, cache_lost_usd=0.1 + 0.2), NOW)
    assert (str(row.cost_usd), str(row.cache_saved_usd), str(row.cache_lost_usd)) == (
        "0.00271500",
        "0E-8",
        "0.30000000",
    )
    assert row.ts == datetime(2026, 11, 3, 9, 30, tzinfo=UTC)


CANDIDATES: list[object] = [
    None,
    "",
    "ok",
    "x" * 36,
    "y" * 37,
    "z" * 129,
    "a\x00b",
    JsonText('{"a":1}'),
    0,
    1,
    -1,
    2**31 - 1,
    2**31,
    2**63,
    True,
    False,
    0.0,
    -0.0,
    1.5,
    -1.5,
    float("nan"),
    float("inf"),
    Decimal("1.5"),
    b"bytes",
]


def test_the_fast_check_passes_only_rows_the_full_check_passes() -> None:
    """`RowChecks.fits` (exact types) never takes a value `broken_column` refuses, and a row is
    refused exactly when the full check names a broken column."""
    checks = models._CHECKS
    base = usage_row(CALL, NOW)
    assert checks.fits(base) and checks.broken_column(base) is None
    num_fast = 0
    for name, *_ in checks.rules:
        for value in CANDIDATES:
            fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(UsageRow)}
            fields[name] = value
            broken = checks.broken_column(SimpleNamespace(**fields))
            if checks.fits(SimpleNamespace(**fields)):
                num_fast += 1
                assert broken is None, (name, value)
            if name in ("status", "kind") or (name == "cache_diagnosis" and isinstance(value, str)):
                continue  # checked beyond the column's rule
            try:
                UsageRow(**fields)
            except ValueError as error:
                assert str(error) == broken, (name, value)
            else:
                assert broken is None, (name, value)
    assert num_fast > 50  # the fast path took the plain values


def test_zero_money_is_the_quantized_zero_of_either_sign() -> None:
    assert (str(to_money(0.0)), str(to_money(-0.0))) == ("0E-8", "-0E-8")
    assert to_money(0.0).as_tuple() == Decimal("0.0").quantize(Decimal("0.00000001")).as_tuple()
    row = usage_row(replace(CALL, cost_usd=0.0, cache_premium_usd=-0.0), NOW)
    assert (str(row.cost_usd), str(row.cache_premium_usd)) == ("0E-8", "-0E-8")
