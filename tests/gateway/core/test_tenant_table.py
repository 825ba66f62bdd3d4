"""The fair per-tenant table: the tenant holding the most pays for the bound, oldest first."""

from __future__ import annotations

from gateway.core.tenant_table import TenantTable


def test_the_largest_tenant_loses_its_own_oldest() -> None:
    table: TenantTable[int] = TenantTable(4)
    table[("acme", "a")] = 1
    for n in range(6):
        table[("globex", f"g{n}")] = n
    assert list(table) == [("acme", "a"), ("globex", "g3"), ("globex", "g4"), ("globex", "g5")]
    table[("initech", "i")] = 9  # globex holds the most: its oldest goes
    assert table.num_entries("globex") == 2 and table[("initech", "i")] == 9
    assert len(table) == 4


def test_on_a_tie_the_tenant_storing_pays_and_a_store_again_refreshes() -> None:
    table: TenantTable[int] = TenantTable(2)
    table[("acme", "a")] = 1
    table[("globex", "g")] = 2
    table[("globex", "h")] = 3  # 2 against 1: globex pays, with its oldest
    assert list(table) == [("acme", "a"), ("globex", "h")]
    table[("acme", "b")] = 4  # 2 against 1 again: acme's oldest goes
    assert set(table) == {("acme", "b"), ("globex", "h")}
    table[("acme", "b")] = 5  # stored again: no growth
    del table[("globex", "h")]
    assert dict(table) == {("acme", "b"): 5} and len(table) == 1
