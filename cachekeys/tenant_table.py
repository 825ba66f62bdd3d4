"""Bounded in-process tables where no tenant can push out another's entries while it holds more
than they do. Hold values only; know nothing of what they are (the response store, keep-warm,
the planner's and the diagnosis's sessions and the fleet's reads use them).

Each tenant's entries are their own insertion-ordered table. Past `max_entries` in all, the
tenant holding the most entries loses its oldest one, so a tenant at or under its fair share
(`max_entries` over the tenants present) is never evicted by another's burst, while one tenant
alone may still use the whole table. `OwnedTable` is the same bound for keys any tenant may send
(a client's session id): each entry belongs to the tenant that stored it last.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, MutableMapping
from typing import Generic, TypeVar

V = TypeVar("V")
Key = tuple[str, str]  # (tenant, the key within the tenant)


class TenantTable(MutableMapping[Key, V], Generic[V]):
    def __init__(self, max_entries: int, on_evict: Callable[[Key, V], None] | None = None) -> None:
        """`on_evict` hears of each entry the bound pushes out (not of those deleted)."""
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._max_entries = max_entries
        self._on_evict = on_evict
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
        inner, value = table.popitem(last=False)
        self._size -= 1
        if not table:
            del self._tenants[tenant]
        if self._on_evict is not None:
            self._on_evict((tenant, inner), value)


class OwnedTable(Generic[V]):
    """Entries keyed by an id alone, each owned by the tenant that stored it last and bounded
    as `TenantTable` by owner: a tenant's flood of new ids never evicts another's. Storing an
    id another tenant owns takes it over (the callers compare the owners)."""

    def __init__(self, max_entries: int) -> None:
        self._by_owner: TenantTable[V] = TenantTable(max_entries, on_evict=self._evicted)
        self._owner: dict[str, str] = {}

    def get(self, key: str) -> V | None:
        owner = self._owner.get(key)
        return None if owner is None else self._by_owner[(owner, key)]

    def pop(self, key: str) -> V | None:
        owner = self._owner.pop(key, None)
        return None if owner is None else self._by_owner.pop((owner, key))

    def put(self, tenant: str, key: str, value: V) -> None:
        """Store `value` as `tenant`'s newest entry, then evict down to the bound."""
        owner = self._owner.get(key)
        if owner is not None and owner != tenant:
            del self._by_owner[(owner, key)]
        self._owner[key] = tenant
        self._by_owner[(tenant, key)] = value

    def owner(self, key: str) -> str | None:
        return self._owner.get(key)

    def num_entries(self, tenant: str) -> int:
        return self._by_owner.num_entries(tenant)

    def __len__(self) -> int:
        return len(self._by_owner)

    def _evicted(self, key: Key, _value: V) -> None:
        tenant, inner = key
        if self._owner.get(inner) == tenant:
            del self._owner[inner]
