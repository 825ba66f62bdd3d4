"""A small ledger with hand-priced calls (USD per Mtok: sonnet 3 in / 15 out / 0.30 cache read /
3.75 cache write; mini 0.15 in / 0.60 out), shared by the query and report tests.

Expected figures, November 2026 (rows 1-6; the two `edge` rows fall outside the month):
  acme:   3 calls, cost 3.60 + 1.23 + 0.21 = 5.04, uncached 3.15 + 2.85 + 0.21 = 6.21
  globex: 3 calls, cost 2.07 + 0 + 0 = 2.07, uncached 4.50
"""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.ledger.models import UsageRow

NOV_1 = datetime(2026, 11, 1, tzinfo=UTC)
DEC_1 = datetime(2026, 12, 1, tzinfo=UTC)


def _row(n: int, ts: datetime, **fields: object) -> UsageRow:
    values: dict[str, object] = {
        "id": f"00000000-0000-0000-0000-{n:012d}",
        "ts": ts,
        "key_id": f"key-{n}",
        "request_id": f"req-{n}",
        "status": "ok",
        "latency_ms": 1000.0,
    }
    values.update(fields)
    return UsageRow(**values)  # type: ignore[arg-type]


def november_rows() -> list[UsageRow]:
    sonnet = {"model": "claude-sonnet"}
    mini = {"model": "gpt-4o-mini"}
    return [
        _row(
            1,
            datetime(2026, 11, 1, 10, 0, tzinfo=UTC),
            tenant="acme",
            session_id="s-1",
            backend="anthropic",
            input_tokens=200_000,
            cache_write_tokens=600_000,
            output_tokens=50_000,
            cost_usd="3.60",
            uncached_cost_usd="3.15",
            cache_diagnosis='{"verdict":"write","stable_prefix_tokens":600000}',
            **sonnet,
        ),
        _row(
            2,
            datetime(2026, 11, 1, 10, 5, tzinfo=UTC),
            tenant="acme",
            session_id="s-1",
            backend="anthropic",
            input_tokens=150_000,
            cache_read_tokens=600_000,
            output_tokens=40_000,
            cost_usd="1.23",
            uncached_cost_usd="2.85",
            cache_diagnosis='{"verdict":"hit"}',
            **sonnet,
        ),
        _row(
            3,
            datetime(2026, 11, 2, 8, 0, tzinfo=UTC),
            tenant="acme",
            session_id="s-2",
            backend="openai",
            input_tokens=1_000_000,
            output_tokens=100_000,
            reasoning_tokens=25_000,  # of the output (priced as output)
            cost_usd="0.21",
            uncached_cost_usd="0.21",
            **mini,
        ),
        _row(
            4,
            datetime(2026, 11, 2, 23, 59, 59, tzinfo=UTC),
            tenant="globex",
            session_id="s-1",
            backend="bedrock",
            input_tokens=100_000,
            cache_read_tokens=900_000,
            output_tokens=100_000,
            cost_usd="2.07",
            uncached_cost_usd="4.50",
            cache_diagnosis='{"verdict":"hit"}',
            **sonnet,
        ),
        _row(
            5,
            datetime(2026, 11, 3, 0, 0, tzinfo=UTC),
            tenant="globex",
            session_id="s-9",
            backend="selfhost",
            replica="http://10.0.0.7:8091",
            input_tokens=400_000,
            output_tokens=200_000,
            **mini,
        ),
        _row(
            6,
            datetime(2026, 11, 2, 12, 0, tzinfo=UTC),
            tenant="globex",
            status="rejected",
            error_kind="QuotaExceeded",
            **sonnet,
        ),
    ]


def edge_rows() -> list[UsageRow]:
    """Just outside November on both sides: [since, until) must exclude them."""
    return [
        _row(
            7,
            datetime(2026, 10, 31, 23, 59, 59, 999000, tzinfo=UTC),
            tenant="acme",
            backend="anthropic",
            model="claude-sonnet",
            input_tokens=1,
            cost_usd="100",
        ),
        _row(
            8,
            DEC_1,
            tenant="acme",
            backend="anthropic",
            model="claude-sonnet",
            input_tokens=1,
            cost_usd="200",
        ),
    ]
