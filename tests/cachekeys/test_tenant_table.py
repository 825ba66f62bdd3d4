"""The fair per-tenant table: the tenant holding the most pays for the bound, oldest first."""

from __future__ import annotations

from cachekeys.tenant_table import OwnedTable, TenantTable


def test_the_largest_tenant_loses_its_own_oldest() -> None:
    table: TenantTable[str, int] = TenantTable(4)
    table[("acme", "a")] = 1
    for n in range(6):
        table[("globex", f"g{n}")] = n
    assert list(table) == [("acme", "a"), ("globex", "g3"), ("globex", "g4"), ("globex", "g5")]
    table[("initech", "i")] = 9  # globex holds the most: its oldest goes
    assert table.num_entries("globex") == 2 and table[("initech", "i")] == 9
    assert len(table) == 4


def test_on_a_tie_the_tenant_storing_pays_and_a_store_again_refreshes() -> None:
    table: TenantTable[str, int] = TenantTable(2)
    table[("acme", "a")] = 1
    table[("globex", "g")] = 2
    table[("globex", "h")] = 3  # 2 against 1: globex pays, with its oldest
    assert list(table) == [("acme", "a"), ("globex", "h")]
    table[("acme", "b")] = 4  # 2 against 1 again: acme's oldest goes
    assert set(table) == {("acme", "b"), ("globex", "h")}
    table[("acme", "b")] = 5  # stored again: no growth
    del table[("globex", "h")]
    assert dict(table) == {("acme", "b"): 5} and len(table) == 1


def test_the_bound_tells_who_it_evicted_and_a_delete_is_not_an_eviction() -> None:
    evicted: list[tuple[tuple[str, str], int]] = []
    table: TenantTable[str, int] = TenantTable(
        2, on_evict=lambda key, value: evicted.append((key, value))
    )
    table[("acme", "a")] = 1
    table[("globex", "g")] = 2
    del table[("acme", "a")]
    table[("globex", "h")] = 3
    table[("globex", "i")] = 4
    assert evicted == [(("globex", "g"), 2)]


def test_an_owned_id_belongs_to_its_last_tenant_and_the_bound_goes_by_owner() -> None:
    table: OwnedTable[int] = OwnedTable(4)
    table.put("acme", "s", 1)
    for n in range(6):
        table.put("globex", f"g{n}", n)
    assert (table.owner("s"), table.get("s"), table.num_entries("globex")) == ("acme", 1, 3)
    assert table.get("g2") is None and table.owner("g2") is None  # evicted: forgotten too
    table.put("globex", "s", 7)  # globex sends acme's id: it is globex's now, one entry still
    assert (table.owner("s"), table.get("s"), len(table)) == ("globex", 7, 4)
    assert table.num_entries("acme") == 0
    assert table.pop("s") == 7 and table.pop("s") is None and len(table) == 3


def test_a_weight_bound_is_paid_by_the_heaviest_tenant() -> None:
    table: TenantTable[bytes, str] = TenantTable(100, weigh=len, max_weight=10)
    table[("acme", b"a")] = "abc"
    table[("globex", b"g")] = "123456"
    table[("globex", b"h")] = "xy"  # 11 in all: globex holds 8 of them, its oldest goes
    assert dict(table.entries("globex")) == {b"h": "xy"} and table.entries("acme")[b"a"] == "abc"
    table[("acme", b"a")] = "abcdefgh"  # stored again: its new weight counts, not both
    assert set(table) == {("acme", b"a"), ("globex", b"h")}
    del table[("acme", b"a")]
    table[("globex", b"i")] = "12345678"  # 10 in all: within the bound
    assert len(table) == 2 and dict(table.entries("acme")) == {}
    table[("acme", b"big")] = "x" * 11  # heavier than the bound alone: not kept
    assert table.num_entries("acme") == 0 and table.num_entries("globex") == 2
