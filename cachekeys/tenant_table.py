"""Bounded in-process tables where no tenant can push out another's entries while it holds more
than they do. Hold values only; know nothing of what they are (the response store, keep-warm,
the planner's and the diagnosis's sessions and the fleet's reads use them).

Each tenant's entries are their own insertion-ordered table. Past `max_entries` in all, the
tenant holding the most entries loses its oldest one, so a tenant at or under its fair share
(`max_entries` over the tenants present) is never evicted by another's burst, while one tenant
alone may still use the whole table. `OwnedTable` is the same bound for keys any tenant may send
(a client's session id): each entry belongs to the tenant that stored it last. A table may
also be bounded by weight (`weigh`, `max_weight`: the characters of texts, say), paid the same
way by the tenant holding the most weight.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, MutableMapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
Key = tuple[str, str]  # (tenant, an id within the tenant): OwnedTable's keys
_EMPTY: Mapping[Any, Any] = MappingProxyType({})


class TenantTable(MutableMapping[tuple[str, K], V], Generic[K, V]):
    def __init__(
        self,
        max_entries: int,
        on_evict: Callable[[tuple[str, K], V], None] | None = None,
        *,
        weigh: Callable[[V], int] | None = None,
        max_weight: int = 0,
    ) -> None:
        """`on_evict` hears of each entry the bound pushes out (not of those deleted). With
        `weigh`, the values' weights together are also held to `max_weight`."""
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._max_entries = max_entries
        self._on_evict = on_evict
        self._tenants: dict[str, OrderedDict[K, V]] = {}
        self._size = 0
        self._weigh, self._max_weight = weigh, max_weight
        self._weights: dict[str, int] = {}  # tenant -> its values' weight (with `weigh`)
        self._weight = 0

    def __getitem__(self, key: tuple[str, K]) -> V:
        tenant, inner = key
        return self._tenants[tenant][inner]

    def __setitem__(self, key: tuple[str, K], value: V) -> None:
        """Store `value` as the tenant's newest entry, then evict down to the bounds."""
        tenant, inner = key
        table = self._tenants.setdefault(tenant, OrderedDict())
        weigh = self._weigh
        if inner not in table:
            self._size += 1
        elif weigh is not None:
            self._add_weight(tenant, -weigh(table[inner]))
        table[inner] = value
        table.move_to_end(inner)
        if weigh is not None:
            self._add_weight(tenant, weigh(value))
            while self._weight > self._max_weight:
                self._evict_from(self._heaviest(tenant))
        while self._size > self._max_entries:
            self._evict_from(self._largest(tenant))

    def __delitem__(self, key: tuple[str, K]) -> None:
        tenant, inner = key
        table = self._tenants[tenant]
        if self._weigh is not None:
            self._add_weight(tenant, -self._weigh(table[inner]))
        del table[inner]
        self._size -= 1
        if not table:
            del self._tenants[tenant]
            if self._weigh is not None:
                del self._weights[tenant]

    def entries(self, tenant: str) -> Mapping[K, V]:
        """The tenant's entries, oldest first (a view: read it, store through the table)."""
        return self._tenants.get(tenant) or _EMPTY

    def __iter__(self) -> Iterator[tuple[str, K]]:
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
        self._weights.clear()
        self._size = self._weight = 0

    def _largest(self, newest: str) -> str:
        """The tenant holding the most entries; on a tie the one that just stored, so an
        equal share is never taken from another. Linear in the tenants present, which are
        the gateway's configured tenants, not client input."""
        return max(self._tenants, key=lambda t: (len(self._tenants[t]), t == newest))

    def _heaviest(self, newest: str) -> str:
        """`_largest` by weight."""
        return max(self._tenants, key=lambda t: (self._weights[t], t == newest))

    def _evict_from(self, tenant: str) -> None:
        table = self._tenants[tenant]
        inner, value = table.popitem(last=False)
        self._size -= 1
        if self._weigh is not None:
            self._add_weight(tenant, -self._weigh(value))
        if not table:
            del self._tenants[tenant]
            if self._weigh is not None:
                del self._weights[tenant]
        if self._on_evict is not None:
            self._on_evict((tenant, inner), value)

    def _add_weight(self, tenant: str, weight: int) -> None:
        self._weights[tenant] = self._weights.get(tenant, 0) + weight
        self._weight += weight


class OwnedTable(Generic[V]):
    """Entries keyed by an id alone, each owned by the tenant that stored it last and bounded
    as `TenantTable` by owner: a tenant's flood of new ids never evicts another's. Storing an
    id another tenant owns takes it over (the callers compare the owners)."""

    def __init__(self, max_entries: int) -> None:
        self._by_owner: TenantTable[str, V] = TenantTable(max_entries, on_evict=self._evicted)
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
