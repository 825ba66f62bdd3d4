"""The `usage` table (one row per backend call) and `UsageRow`, the frozen record of one call.

Counts, money and timings only: no column may hold prompt or completion text.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Literal, cast

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from adapters.records import slot_init
from gateway.ledger.row_checks import MAX_DIAGNOSIS_BYTES as MAX_DIAGNOSIS_BYTES
from gateway.ledger.row_checks import JsonText as JsonText
from gateway.ledger.row_checks import RowChecks, check_diagnosis, values_of

log = logging.getLogger(__name__)
CallStatus = Literal["ok", "error", "client_disconnect", "rejected"]
CALL_STATUSES: tuple[str, ...] = ("ok", "error", "client_disconnect", "rejected")
RowKind = Literal["model_call", "tool_call", "tool_run"]
ROW_KINDS: tuple[str, ...] = ("model_call", "tool_call", "tool_run")
MCP_DOOR = "mcp"  # the door of a tool call's row (gateway/mcp/accounting.py): kind tool_call
MONEY_QUANTUM = Decimal("0.00000001")  # Numeric(18, 8)
MAX_MONEY = Decimal(10) ** 10  # Numeric(18, 8) holds 10 digits before the point
# a float below it is a decimal below MAX_MONEY: its shortest repr cannot round up to 1e10
_MAX_MONEY_FLOAT = float(MAX_MONEY)
_ZERO_MONEY = Decimal("0E-8")  # to_money(0.0): Decimal("0.0").quantize(MONEY_QUANTUM)


class UtcDateTime(sa.types.TypeDecorator[datetime]):
    """Stores naive UTC on every dialect and hands back aware UTC datetimes."""

    impl = sa.DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("usage timestamps must be timezone-aware")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    pass


class UsageRecord(Base):
    __tablename__ = "usage"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    ts: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    tenant: Mapped[str] = mapped_column(sa.String(128))
    key_id: Mapped[str] = mapped_column(sa.String(128))
    session_id: Mapped[str | None] = mapped_column(sa.String(256))
    model: Mapped[str] = mapped_column(sa.String(256))
    backend: Mapped[str | None] = mapped_column(sa.String(128))
    replica: Mapped[str | None] = mapped_column(sa.String(512))
    attempt: Mapped[int] = mapped_column(sa.Integer)
    status: Mapped[str] = mapped_column(sa.String(32))
    error_kind: Mapped[str | None] = mapped_column(sa.String(64))
    input_tokens: Mapped[int] = mapped_column(sa.BigInteger)
    cache_read_tokens: Mapped[int] = mapped_column(sa.BigInteger)
    cache_write_tokens: Mapped[int] = mapped_column(sa.BigInteger)
    output_tokens: Mapped[int] = mapped_column(sa.BigInteger)
    cost_usd: Mapped[Decimal] = mapped_column(sa.Numeric(18, 8))
    uncached_cost_usd: Mapped[Decimal] = mapped_column(sa.Numeric(18, 8))
    ttft_ms: Mapped[float | None] = mapped_column(sa.Float)
    latency_ms: Mapped[float] = mapped_column(sa.Float)
    cache_diagnosis: Mapped[str | None] = mapped_column(sa.Text)
    request_id: Mapped[str] = mapped_column(sa.String(128))
    door: Mapped[str | None] = mapped_column(sa.String(32))
    # the call's cache profit and loss (gateway/core/cache_money.py; migration 0003)
    cache_saved_usd: Mapped[Decimal] = mapped_column(sa.Numeric(18, 8), server_default="0")
    cache_premium_usd: Mapped[Decimal] = mapped_column(sa.Numeric(18, 8), server_default="0")
    cache_lost_usd: Mapped[Decimal] = mapped_column(sa.Numeric(18, 8), server_default="0")
    cache_cause: Mapped[str | None] = mapped_column(sa.String(32))
    # ms the call waited in the gateway for a slot on its replica; null: it did not (0008)
    queue_ms: Mapped[float | None] = mapped_column(sa.Float)
    # of cache_write_tokens, those written at the 1 h TTL; of output_tokens, those the model
    # spent reasoning, where the provider reports them apart (0009)
    cache_write_1h_tokens: Mapped[int] = mapped_column(sa.BigInteger, server_default="0")
    reasoning_tokens: Mapped[int] = mapped_column(sa.BigInteger, server_default="0")
    # model_call, tool_call (the MCP door's row of a call) or tool_run (a sandboxed run, billed
    # by its vCPU-seconds and GB-seconds; NULL on other rows) (0010)
    kind: Mapped[str] = mapped_column(sa.String(16), server_default="model_call")
    vcpu_seconds: Mapped[float | None] = mapped_column(sa.Float)
    gb_seconds: Mapped[float | None] = mapped_column(sa.Float)

    __table_args__ = (
        sa.Index("ix_usage_tenant_ts", "tenant", "ts"),
        sa.Index("ix_usage_key_ts", "key_id", "ts"),
        sa.Index("ix_usage_model_ts", "model", "ts"),
        sa.Index("ix_usage_tenant_session", "tenant", "session_id"),
    )


class UsageDailyRecord(Base):
    """`usage` summed per UTC day, tenant, model, backend (`(none)` for none) and key, kept by
    triggers on `usage` (migration 0005); money in integer units of 1e-8 dollars."""

    __tablename__ = "usage_daily"

    day: Mapped[date] = mapped_column(sa.Date, primary_key=True)
    tenant: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    model: Mapped[str] = mapped_column(sa.String(256), primary_key=True)
    backend: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    key_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    num_calls: Mapped[int] = mapped_column(sa.BigInteger)
    input_tokens: Mapped[int] = mapped_column(sa.BigInteger)
    cache_read_tokens: Mapped[int] = mapped_column(sa.BigInteger)
    cache_write_tokens: Mapped[int] = mapped_column(sa.BigInteger)
    output_tokens: Mapped[int] = mapped_column(sa.BigInteger)
    cost_e8: Mapped[int] = mapped_column(sa.BigInteger)
    uncached_cost_e8: Mapped[int] = mapped_column(sa.BigInteger)
    cache_write_1h_tokens: Mapped[int] = mapped_column(sa.BigInteger, server_default="0")
    reasoning_tokens: Mapped[int] = mapped_column(sa.BigInteger, server_default="0")


class ApiKeyRecord(Base):
    """An API key issued through `/admin/keys` or the console: its sha256, never the key."""

    __tablename__ = "api_keys"

    tenant: Mapped[str] = mapped_column(sa.String(128), primary_key=True)  # ids are per tenant
    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    sha256: Mapped[str] = mapped_column(sa.String(64), unique=True)
    models: Mapped[str | None] = mapped_column(sa.String(4096))  # JSON list; NULL: the tenant's
    budget_usd: Mapped[Decimal | None] = mapped_column(sa.Numeric(18, 8))
    budget_window: Mapped[str | None] = mapped_column(sa.String(8))  # day | week | month
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    created_by: Mapped[str] = mapped_column(sa.String(128))


class AdminAuditRecord(Base):
    """Who did what to which admin object, and when (key issue, expiry, revocation)."""

    __tablename__ = "admin_audit"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    ts: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    actor: Mapped[str] = mapped_column(sa.String(128))
    action: Mapped[str] = mapped_column(sa.String(64))
    target: Mapped[str] = mapped_column(sa.String(256))
    detail: Mapped[str] = mapped_column(sa.String(2048))


class ConsoleSessionRecord(Base):
    """A console login: the sha256 of its cookie (never the cookie), the admin token it was
    opened with (as an HMAC: a rotated token closes it) and its expiry (migration 0007)."""

    __tablename__ = "console_sessions"

    cookie_sha256: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    admin_hmac: Mapped[str] = mapped_column(sa.String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime())


def to_money(value: Decimal | float | int | str) -> Decimal:
    """Exact decimal dollars at the ledger's precision; floats go through their shortest repr."""
    if type(value) is float and 0.0 <= value < _MAX_MONEY_FLOAT:  # the pipeline's: finite
        text = repr(value)  # "-0.0" for -0.0, whose money is "-0E-8"
        return _ZERO_MONEY if text == "0.0" else Decimal(text).quantize(MONEY_QUANTUM)
    try:
        exact = value if isinstance(value, Decimal) else Decimal(str(value))
    except ArithmeticError as error:
        raise ValueError(f"{value!r} is not an amount of money") from error
    if not exact.is_finite() or not 0 <= exact < MAX_MONEY:
        raise ValueError(f"{value!r} is not an amount between 0 and {MAX_MONEY}")
    return exact.quantize(MONEY_QUANTUM)


@slot_init
@dataclass(frozen=True, slots=True, kw_only=True)
class UsageRow:
    """One backend call as the ledger stores it. `id` makes a retried insert idempotent."""

    id: str
    ts: datetime
    tenant: str
    key_id: str
    model: str
    request_id: str
    status: CallStatus
    session_id: str | None = None
    backend: str | None = None
    replica: str | None = None
    attempt: int = 0
    error_kind: str | None = None
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    cost_usd: Decimal = Decimal(0)
    uncached_cost_usd: Decimal = Decimal(0)
    ttft_ms: float | None = None
    latency_ms: float = 0.0
    cache_diagnosis: str | None = None  # small JSON text from the cache-break diagnosis
    door: str | None = None  # the client's route: chat.completions, messages, responses, embeddings
    cache_saved_usd: Decimal = Decimal(0)
    cache_premium_usd: Decimal = Decimal(0)
    cache_lost_usd: Decimal = Decimal(0)
    cache_cause: str | None = None
    queue_ms: float | None = None  # waited for a replica slot (first attempt only)
    cache_write_1h_tokens: int = 0  # of cache_write_tokens, those at the 1 h TTL
    reasoning_tokens: int = 0  # of output_tokens, those spent reasoning (where reported apart)
    kind: RowKind = "model_call"
    vcpu_seconds: float | None = None  # a tool run's: its vCPUs times its billed seconds
    gb_seconds: float | None = None  # a tool run's: its memory in GB times its billed seconds

    def __post_init__(self) -> None:
        """Refuses here, at the caller, any row the database would refuse later: a row that
        cannot be inserted would otherwise block the spool behind it. The gateway's rows take
        the fast path (exact types, `RowChecks.fits`); any other row gets the full checks and their
        messages, in the same order."""
        ts = self.ts
        is_plain = (
            type(ts) is datetime
            and ts.tzinfo is not None
            and self.status in CALL_STATUSES
            and self.kind in ROW_KINDS
            and _CHECKS.fits(self)
        )
        if not is_plain:
            if not isinstance(ts, datetime) or ts.tzinfo is None:
                raise ValueError("UsageRow.ts must be a timezone-aware datetime")
            if self.status not in CALL_STATUSES:
                raise ValueError(f"UsageRow.status must be one of {CALL_STATUSES}")
            if self.kind not in ROW_KINDS:
                raise ValueError(f"UsageRow.kind must be one of {ROW_KINDS}")
        for name, value in zip(MONEY_FIELDS, _MONEY_OF(self)):  # noqa: B905 (see RowChecks.fits)
            object.__setattr__(self, name, to_money(value))
        if not is_plain and (broken := _CHECKS.broken_column(self)) is not None:
            raise ValueError(broken)
        if self.cache_diagnosis is not None:
            check_diagnosis(self.cache_diagnosis)

    def to_json(self) -> str:
        """The row as compact JSON; money as decimal strings so nothing is rounded through
        floats."""
        return self.to_line()[:-1].decode()

    def to_line(self) -> bytes:
        """One spool line, newline included (orjson, which writes the dataclass itself, its
        datetime as `isoformat` does and, by `default`, each Decimal as `str`: it is written on
        the request path; the standard library's escapes take what orjson refuses, such as a
        lone surrogate)."""
        try:
            # a checked row holds nothing else orjson cannot write: Decimals become `str`
            return orjson.dumps(self, default=str, option=orjson.OPT_APPEND_NEWLINE)
        except orjson.JSONEncodeError:
            values = {
                **{name: getattr(self, name) for name in _PLAIN_FIELDS},
                "ts": self.ts.isoformat(),
                **{name: str(getattr(self, name)) for name in MONEY_FIELDS},
            }
            return (json.dumps(values, separators=(",", ":")) + "\n").encode()

    @classmethod
    def from_json(cls, line: str | bytes) -> UsageRow:
        """The row of one spool line: `to_line`'s, or `call_line`'s (gateway/ledger/
        call_ledger.py: money as floats, nothing checked yet). ValueError (or TypeError, a
        missing field) for a row `__init__` refuses."""
        return cls(**_line_values(line))

    @classmethod
    def from_line(cls, line: str | bytes) -> UsageRow:
        """`from_json`, but a row whose only fault is its cache diagnosis is kept without it
        (the diagnosis explains a bill; it must not lose the bill)."""
        values = _line_values(line)
        try:
            return cls(**values)
        except ValueError:
            if values.get("cache_diagnosis") is None:
                raise
            row = cls(**{**values, "cache_diagnosis": None})
            log.warning("usage ledger: dropped the invalid cache diagnosis of %s", row.request_id)
            return row

    def to_values(self) -> dict[str, object]:
        """Column values by name, as `Connection.execute` takes them (the ledger's own insert
        reads them in its parameter order: gateway/ledger/usage_insert.py)."""
        return {name: getattr(self, name) for name in USAGE_COLUMNS}


USAGE_TABLE = cast(sa.Table, UsageRecord.__table__)
USAGE_COLUMNS: tuple[str, ...] = tuple(c.name for c in USAGE_TABLE.columns)


MONEY_FIELDS = (
    "cost_usd",
    "uncached_cost_usd",
    "cache_saved_usd",
    "cache_premium_usd",
    "cache_lost_usd",
)
_PLAIN_FIELDS = tuple(n for n in USAGE_COLUMNS if n != "ts" and n not in MONEY_FIELDS)
_CHECKS = RowChecks(USAGE_TABLE)
_MONEY_OF = values_of(MONEY_FIELDS)


def _line_values(line: str | bytes) -> dict[str, Any]:
    """A spool line's values as `UsageRow` takes them: its time parsed, money written as text
    made `Decimal` (floats are left to the row)."""
    try:
        values: dict[str, Any] = orjson.loads(line)
    except orjson.JSONDecodeError:  # the standard library's escape of a lone surrogate
        values = json.loads(line)
    values["ts"] = datetime.fromisoformat(values["ts"])
    if "kind" not in values and values.get("door") == MCP_DOOR:  # a call line names no kind
        values["kind"] = "tool_call"
    for name in MONEY_FIELDS:
        value = values.get(name)  # a line written before the P&L columns has none
        if type(value) is str:
            values[name] = Decimal(value)
    return values
