"""How usage rows get into the `usage` table: `INSERT ... ON CONFLICT (id) DO NOTHING`, so a row
written twice (a batch retried after a lost acknowledgement) is stored once.

On SQLite, the default ledger, the statement is compiled once and each batch goes to the
driver's `executemany` as tuples, each value through SQLAlchemy's own bind processor of its
column: what `Connection.execute` does, without its per-row, per-key parameter handling (~15 µs a
row of the writer thread's CPU, a fifth of a row's insert with the rollup trigger). PostgreSQL
keeps `Connection.execute` (its driver takes named parameters; not measured there).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, StatementError

from gateway.ledger.models import USAGE_TABLE, UsageRow
from gateway.ledger.row_checks import values_of

_POSTGRES_INSERT = postgresql.insert(USAGE_TABLE).on_conflict_do_nothing(index_elements=["id"])
_SQLITE_INSERT = sqlite.insert(USAGE_TABLE).on_conflict_do_nothing(index_elements=["id"])
Processor = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class _Compiled:
    """The SQLite statement's text, a row's values in its parameter order, and the columns'
    bind processors by position (those SQLAlchemy would apply)."""

    sql: str
    values: Callable[[UsageRow], tuple[Any, ...]]
    processors: tuple[tuple[int, Processor], ...]

    def parameters(self, rows: Sequence[UsageRow]) -> list[tuple[Any, ...]]:
        """Raises `StatementError`, as `Connection.execute` does, when a processor refuses a
        value (a row error: the batch is retried row by row)."""
        processors, parameters = self.processors, []
        for row in rows:
            values = list(self.values(row))
            try:
                for index, process in processors:
                    values[index] = process(values[index])
            except Exception as error:
                raise StatementError(str(error), self.sql, None, error) from error
            parameters.append(tuple(values))
        return parameters


# per SQLite engine's dialect, gone with its engine
_compiled: weakref.WeakKeyDictionary[Dialect, _Compiled] = weakref.WeakKeyDictionary()


def insert_rows(engine: Engine, rows: Sequence[UsageRow]) -> None:
    """INSERT ... ON CONFLICT (id) DO NOTHING in one transaction: writing a row twice leaves
    one row. No rows: nothing is sent (an empty batch is not a statement any driver takes)."""
    if not rows:
        return
    dialect = engine.dialect
    if dialect.name == "postgresql":
        with engine.begin() as connection:
            connection.execute(_POSTGRES_INSERT, [row.to_values() for row in rows])
        return
    compiled = _compiled.get(dialect) or _compiled.setdefault(dialect, _compile(dialect))
    parameters = compiled.parameters(rows)
    with engine.begin() as connection:
        connection.exec_driver_sql(compiled.sql, parameters)


def is_row_error(error: Exception) -> bool:
    """The database (or the statement's parameter handling) refused the data, not the call."""
    if isinstance(error, DataError | IntegrityError):
        return True
    return isinstance(error, StatementError) and not isinstance(error, DBAPIError)


def _compile(dialect: Dialect) -> _Compiled:
    compiled = _SQLITE_INSERT.compile(dialect=dialect)
    names = compiled.positiontup
    if not compiled.positional or names is None:  # SQLite's driver takes `?` parameters
        raise RuntimeError(f"the usage insert is not positional on {dialect.name}")
    columns = USAGE_TABLE.columns
    processors = []
    for index, name in enumerate(names):
        column_type = columns[name].type
        process = column_type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            processors.append((index, process))
    return _Compiled(compiled.string, values_of(tuple(names)), tuple(processors))
