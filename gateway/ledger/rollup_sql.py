"""The SQL of the daily rollup's triggers and backfill (`usage_daily`, migrations 0005 and 0009),
for a given set of summed token columns: each migration names the columns of its own schema, so
what it creates never changes when a later migration adds one.

Money is summed in integer units of 1e-8 dollars (the ledger's precision), exact on every
dialect. A row skipped by `ON CONFLICT DO NOTHING` (a retried insert) fires no trigger, so it is
counted once. A group whose rows were all deleted stays with zero calls (reports skip it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

MONEY = {"cost_e8": "cost_usd", "uncached_cost_e8": "uncached_cost_usd"}
KEYS = ("day", "tenant", "model", "backend", "key_id")
ADD, REMOVE, CHANGE = TRIGGERS = ("usage_daily_add", "usage_daily_remove", "usage_daily_change")
_PG_UNITS = "round({} * 100000000)::bigint"
_SQLITE_UNITS = "CAST(round({} * 100000000) AS INTEGER)"

Execute = Callable[[str], object]


class RollupSql:
    """The statements for a `usage_daily` whose summed token columns are `sums`."""

    def __init__(self, sums: Sequence[str]) -> None:
        self.sums = tuple(sums)
        self.counts = ("num_calls", *self.sums, *MONEY)
        self.columns = ", ".join((*KEYS, *self.counts))
        self._add = ", ".join(f"{c} = usage_daily.{c} + excluded.{c}" for c in self.counts)

    def grouped_select(self, source: str, day: str, units: str) -> str:
        """Sums of `source`'s rows per rollup key, named as usage_daily's columns (the backfill
        and PostgreSQL's triggers)."""
        sums = ", ".join(f"sum({c}) AS {c}" for c in self.sums)
        money = ", ".join(f"sum({units.format(c)}) AS {name}" for name, c in MONEY.items())
        return (
            f"SELECT {day} AS day, tenant, model, coalesce(backend, '(none)') AS backend, "
            f"key_id, count(*) AS num_calls, {sums}, {money} FROM {source} GROUP BY 1, 2, 3, 4, 5"
        )

    def backfill(self, postgres: bool) -> str:
        """Fills `usage_daily` from the rows already in `usage`."""
        day, units = ("ts::date", _PG_UNITS) if postgres else ("date(ts)", _SQLITE_UNITS)
        return (
            f"INSERT INTO usage_daily ({self.columns}) {self.grouped_select('usage', day, units)}"
        )

    def create_triggers(self, execute: Execute, postgres: bool) -> None:
        """Insert, delete and update on `usage` each carried into usage_daily (on PostgreSQL,
        statement triggers over transition tables; on SQLite, row triggers)."""
        if not postgres:
            for name, event, body in self._sqlite_triggers():
                execute(
                    f"CREATE TRIGGER {name} AFTER {event} ON usage FOR EACH ROW BEGIN{body}\nEND"
                )
            return
        for name, body, event, tables in self._pg_triggers():
            execute(
                f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN{body}\n"
                "    RETURN NULL;\nEND\n$$"
            )
            execute(
                f"CREATE TRIGGER {name} AFTER {event} ON usage REFERENCING {tables} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {name}()"
            )

    def _pg_triggers(self) -> tuple[tuple[str, str, str, str], ...]:
        """(function, its body, the trigger's event, its transition tables)"""
        add = f"""
    INSERT INTO usage_daily ({self.columns})
    {self.grouped_select("inserted", "ts::date", _PG_UNITS)} ORDER BY 1, 2, 3, 4, 5
    ON CONFLICT ({", ".join(KEYS)}) DO UPDATE SET {self._add};"""
        remove = f"""
    UPDATE usage_daily AS d SET {", ".join(f"{c} = d.{c} - r.{c}" for c in self.counts)}
    FROM ({self.grouped_select("removed", "ts::date", _PG_UNITS)}) AS r
    WHERE {" AND ".join(f"d.{k} = r.{k}" for k in KEYS)};"""
        return (
            (ADD, add, "INSERT", "NEW TABLE AS inserted"),
            (REMOVE, remove, "DELETE", "OLD TABLE AS removed"),
            (CHANGE, remove + add, "UPDATE", "OLD TABLE AS removed NEW TABLE AS inserted"),
        )

    def _sqlite_triggers(self) -> tuple[tuple[str, str, str], ...]:
        """(trigger, its event, its body)"""
        add = f"""
    INSERT INTO usage_daily ({self.columns})
    VALUES (date(NEW.ts), NEW.tenant, NEW.model, coalesce(NEW.backend, '(none)'), NEW.key_id, 1,
            {", ".join(f"NEW.{c}" for c in self.sums)},
            {", ".join(_SQLITE_UNITS.format(f"NEW.{c}") for c in MONEY.values())})
    ON CONFLICT ({", ".join(KEYS)}) DO UPDATE SET {self._add};"""
        money = ", ".join(
            f"{n} = {n} - {_SQLITE_UNITS.format(f'OLD.{c}')}" for n, c in MONEY.items()
        )
        remove = f"""
    UPDATE usage_daily SET num_calls = num_calls - 1,
        {", ".join(f"{c} = {c} - OLD.{c}" for c in self.sums)},
        {money}
    WHERE day = date(OLD.ts) AND tenant = OLD.tenant AND model = OLD.model
        AND backend = coalesce(OLD.backend, '(none)') AND key_id = OLD.key_id;"""
        return (
            (ADD, "INSERT", add),
            (REMOVE, "DELETE", remove),
            (CHANGE, "UPDATE", remove + add),
        )


def drop_triggers(execute: Execute, postgres: bool) -> None:
    """The rollup's triggers (and PostgreSQL's trigger functions) gone."""
    for name in TRIGGERS:
        execute(f"DROP TRIGGER IF EXISTS {name}" + (" ON usage" if postgres else ""))
        if postgres:
            execute(f"DROP FUNCTION IF EXISTS {name}()")
