"""Typed errors of admission. Each carries, as attributes, all the gateway needs to answer HTTP.

Must not know about HTTP: the gateway maps `QuotaExceeded` to 429, `LimitNeverFits` to 400 and
`QuotaStoreUnavailable` to 503; it answers `SpendNotSeeded` itself (seeds, reserves again).
"""

from __future__ import annotations

import math

from quotas.limits import Ask, LimitName, Limits, WindowUse, micro_to_usd


class QuotaError(Exception):
    """Base of every error raised by `quotas`."""


class QuotaExceeded(QuotaError):
    """The call fits the limit in principle but not now. `current` is the use before this call
    (dollars for the budget); `retry_after_s` is when it could fit, assuming no refunds meanwhile."""

    def __init__(
        self,
        limit: LimitName,
        limit_value: float,
        current: float,
        retry_after_ms: int,
        window: WindowUse | None = None,
    ) -> None:
        self.limit = limit
        self.limit_value = limit_value
        self.current = current
        self.retry_after_ms = retry_after_ms
        self.retry_after_s = max(1, math.ceil(retry_after_ms / 1000))
        self.window = window
        super().__init__(
            f"{limit} exceeded: limit {limit_value}, current {current}, "
            f"retry after {self.retry_after_s} s"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QuotaExceeded):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[object, ...]:
        return (self.limit, self.limit_value, self.current, self.retry_after_ms, self.window)


class LimitNeverFits(QuotaError):
    """The call asks for more than the limit allows even when nothing else is in use."""

    def __init__(self, limit: LimitName, limit_value: float, requested: float) -> None:
        self.limit = limit
        self.limit_value = limit_value
        self.requested = requested
        super().__init__(f"{limit} is {limit_value}, the call alone needs {requested}")


class ReservationConflict(QuotaError):
    """A reservation id was reused while its first use is still on record."""

    def __init__(self, reservation_id: str) -> None:
        self.reservation_id = reservation_id
        super().__init__(f"reservation id {reservation_id!r} is already on record")


class SpendNotSeeded(QuotaError):
    """The store holds no seeded spend of `period` for the tenant (a store that requires it, and
    lost its data, or a month no seeding reached yet): seed it from the ledger, then reserve
    again. Nothing was held."""

    def __init__(self, tenant: str, period: str) -> None:
        self.tenant = tenant
        self.period = period
        super().__init__(f"no seeded spend of {period} for tenant {tenant!r}")


class QuotaStoreUnavailable(QuotaError):
    """The shared store cannot be reached and the tenant's policy says fail closed."""

    def __init__(self, store: str, reason: str) -> None:
        self.store = store
        self.reason = reason
        super().__init__(f"quota store {store} unavailable: {reason}")


def check_never_fits(limits: Limits, ask: Ask) -> None:
    """Raise `LimitNeverFits` when the ask exceeds a limit even with nothing else in use."""
    if limits.tokens_per_minute is not None and ask.tokens > limits.tokens_per_minute:
        raise LimitNeverFits("tokens_per_minute", limits.tokens_per_minute, ask.tokens)
    budget = limits.budget_micro_usd
    if budget is not None and ask.cost_micro_usd > budget:
        raise LimitNeverFits(
            "monthly_budget_usd", micro_to_usd(budget), micro_to_usd(ask.cost_micro_usd)
        )
