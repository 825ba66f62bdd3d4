"""Admission: token, request, concurrency, session and dollar reservations with settle/refund.

Public names: `Limits`, `Ask`, `Actual`, `Reservation`, `Settlement`, `UsageSnapshot`
(quotas.limits); `QuotaStore` (quotas.store); `MemoryQuotaStore` (quotas.memory);
`RedisQuotaStore` (quotas.redis_store); `FailoverQuotaStore` (quotas.failover); errors
`QuotaExceeded`, `LimitNeverFits`, `QuotaStoreUnavailable` (quotas.errors). Knows no HTTP.
"""
