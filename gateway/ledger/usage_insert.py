"""How usage rows get into the `usage` table: `INSERT ... ON CONFLICT (id) DO NOTHING`, so a row
written twice (a batch retried after a lost acknowledgement) is stored once.

The statement is compiled once per engine and each batch goes to the driver's `executemany`
(`?` tuples on SQLite, `%(name)s` mappings on psycopg), each value through SQLAlchemy's own
bind processor of its column: what `Connection.execute` does, without its per-row, per-key
parameter handling. The writer thread's CPU per row inserted, 50-row batches: 11-20 µs less on
SQLite (a fifth to a quarter of it, the rollup trigger's work included), ~21 µs on PostgreSQL.
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
    """The statement's text, its parameters' names in order (positional drivers take tuples,
    the others mappings), a row's values in that order, and the columns' bind processors by
    position (those SQLAlchemy would apply)."""

    sql: str
    names: tuple[str, ...] | None  # None: positional
    values: Callable[[UsageRow], tuple[Any, ...]]
    processors: tuple[tuple[int, Processor], ...]

    def parameters(self, rows: Sequence[UsageRow]) -> list[Any]:
        """Raises `StatementError`, as `Connection.execute` does, when a processor refuses a
        value (a row error: the batch is retried row by row)."""
        processors, names, parameters = self.processors, self.names, []
        for row in rows:
            values = list(self.values(row))
            try:
                for index, process in processors:
                    values[index] = process(values[index])
            except Exception as error:
                raise StatementError(str(error), self.sql, None, error) from error
            parameters.append(tuple(values) if names is None else dict(zip(names, values)))  # noqa: B905
        return parameters


# per engine's dialect, gone with its engine
_compiled: weakref.WeakKeyDictionary[Dialect, _Compiled] = weakref.WeakKeyDictionary()


def insert_rows(engine: Engine, rows: Sequence[UsageRow]) -> None:
    """INSERT ... ON CONFLICT (id) DO NOTHING in one transaction: writing a row twice leaves
    one row. No rows: nothing is sent (an empty batch is not a statement any driver takes)."""
    if not rows:
        return
    dialect = engine.dialect
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
    statement = _POSTGRES_INSERT if dialect.name == "postgresql" else _SQLITE_INSERT
    compiled = statement.compile(dialect=dialect)
    names = compiled.positiontup if compiled.positional else tuple(compiled.params)
    if names is None:
        raise RuntimeError(f"the usage insert has no parameter order on {dialect.name}")
    columns = USAGE_TABLE.columns
    processors = []
    for index, name in enumerate(names):
        column_type = columns[name].type
        process = column_type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            processors.append((index, process))
    return _Compiled(
        compiled.string,
        None if compiled.positional else tuple(names),
        values_of(tuple(names)),
        tuple(processors),
    )
