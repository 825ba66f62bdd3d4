"""A bounded in-process table keyed by (tenant, key) where no tenant can push out another's
entries while it holds more than they do. Holds values only; knows nothing of what they are.

Each tenant's entries are their own insertion-ordered table. Past `max_entries` in all, the
tenant holding the most entries loses its oldest one, so a tenant at or under its fair share
(`max_entries` over the tenants present) is never evicted by another's burst, while one tenant
alone may still use the whole table.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, MutableMapping
from typing import Generic, TypeVar

V = TypeVar("V")
Key = tuple[str, str]  # (tenant, the key within the tenant)


class TenantTable(MutableMapping[Key, V], Generic[V]):
    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._max_entries = max_entries
        self._tenants: dict[str, OrderedDict[str, V]] = {}
        self._size = 0

    def __getitem__(self, key: Key) -> V:
        tenant, inner = key
        return self._tenants[tenant][inner]

    def __setitem__(self, key: Key, value: V) -> None:
        """Store `value` as the tenant's newest entry, then evict down to the bound."""
        tenant, inner = key
        table = self._tenants.setdefault(tenant, OrderedDict())
        if inner not in table:
            self._size += 1
        table[inner] = value
        table.move_to_end(inner)
        while self._size > self._max_entries:
            self._evict_from(self._largest(tenant))

    def __delitem__(self, key: Key) -> None:
        tenant, inner = key
        table = self._tenants[tenant]
        del table[inner]
        self._size -= 1
        if not table:
            del self._tenants[tenant]

    def __iter__(self) -> Iterator[Key]:
        for tenant, table in list(self._tenants.items()):
            for inner in list(table):
                yield tenant, inner

    def __len__(self) -> int:
        return self._size

    def num_entries(self, tenant: str) -> int:
        table = self._tenants.get(tenant)
        return 0 if table is None else len(table)

    def clear(self) -> None:
        self._tenants.clear()
        self._size = 0

    def _largest(self, newest: str) -> str:
        """The tenant holding the most entries; on a tie the one that just stored, so an
        equal share is never taken from another. Linear in the tenants present, which are
        the gateway's configured tenants, not client input."""
        return max(self._tenants, key=lambda t: (len(self._tenants[t]), t == newest))

    def _evict_from(self, tenant: str) -> None:
        table = self._tenants[tenant]
        table.popitem(last=False)
        self._size -= 1
        if not table:
            del self._tenants[tenant]
