"""Batch writes with `executemany`, for the ingestion hot path.

The ORM's bulk_create prepares every value through several layers (about
20 µs each), which caps ingestion near 1,000 events/s; here each column gets
its backend's adapter once and the driver runs one prepared statement.

On PostgreSQL the statement runs on a cursor that binds values on the
server: Django's own cursor binds them on the client, quoting every value
in Python, which was three quarters of an event's write time there.
Inserts go by COPY; updates and lookups are one statement per batch, each
column's values bound as one binary array.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Generic, NamedTuple, TypeVar

import orjson
from django.db import connection, models

from .models import Change, Resource

Adapter = Callable[[Any], Any]
Row = TypeVar("Row", bound=NamedTuple)


def _sqlite_datetime(value: datetime | None) -> str | None:
    """What Django's SQLite adapter stores (naive UTC text), without its layers."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.isoformat(" ")
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    return value.isoformat(" ")[:-6]  # without "+00:00"; no naive copy made


def _sqlite_json(value: Any) -> str:
    """Compact JSON text; orjson is several times faster than the json module."""
    return orjson.dumps(value).decode()


def _postgres_json() -> Adapter:
    """A jsonb parameter serialised by orjson (the stored jsonb is the same).

    psycopg is imported here, not with the module: only PostgreSQL needs it, and
    every command (`manage.py harvest` on SQLite, say) imports this module."""
    from psycopg.types.json import Jsonb

    return lambda value: Jsonb(value, dumps=orjson.dumps)


def _adapter(field: models.Field) -> Adapter | None:
    ops = connection.ops
    # SQLite stores text; in UTC, as the fast adapters assume, unless told otherwise.
    sqlite_utc = connection.vendor == "sqlite" and connection.timezone_name == "UTC"
    if isinstance(field, models.DateTimeField):
        return _sqlite_datetime if sqlite_utc else ops.adapt_datetimefield_value
    if isinstance(field, models.JSONField):
        if connection.vendor == "sqlite" and field.encoder is None:
            return _sqlite_json
        if connection.vendor == "postgresql" and field.encoder is None:
            return _postgres_json()
        return lambda value: ops.adapt_json_value(value, field.encoder)
    return None


def concrete_field(model: type[models.Model], name: str) -> models.Field:
    """A field with a column of its own; a reverse relation here is a programming error."""
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or field.column is None:
        raise TypeError(f"{model.__name__}.{name} is not a column")
    return field


class BulkWriter(Generic[Row]):
    """INSERT and UPDATE-by-id statements for one row type.

    The row type is a NamedTuple whose field names are the model's field
    names, in any order: the column list is derived from it, so rows are
    built by name and a renamed or reordered field cannot shift a value
    into the wrong column.
    """

    def __init__(
        self, model: type[models.Model], row_type: type[Row], *, fixed: Sequence[str] = ()
    ) -> None:
        """`fixed`: fields an update never changes, left out of its SET (see `update`)."""
        meta = model._meta
        self.row_type = row_type
        fields = [concrete_field(model, name) for name in row_type._fields]
        adapters = ((index, _adapter(field)) for index, field in enumerate(fields))
        self.adapters = [(index, adapt) for index, adapt in adapters if adapt is not None]
        quote = connection.ops.quote_name
        table = quote(meta.db_table)
        columns = [quote(field.column) for field in fields]
        placeholders = ", ".join(["%s"] * len(columns))
        # Identifiers come from the model's metadata, quoted; values are parameters.
        self.insert_sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders})"  # noqa: S608
        self.copy_sql = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
        unknown = set(fixed) - set(row_type._fields)
        if unknown:
            raise TypeError(f"fixed fields not in {row_type.__name__}: {sorted(unknown)}")
        self.updated = [index for index, name in enumerate(row_type._fields) if name not in fixed]
        assignments = ", ".join(f"{columns[index]} = %s" for index in self.updated)
        pk = quote(meta.pk.column)
        self.update_sql = f"UPDATE {table} SET {assignments} WHERE {pk} = %s"  # noqa: S608
        updated_fields = [fields[index] for index in self.updated]
        self.update_from_arrays_sql = _update_from_arrays_sql(table, pk, meta.pk, updated_fields)

    def _adapt(self, rows: Sequence[Row]) -> list[list[Any]]:
        if not isinstance(rows[0], self.row_type):
            raise TypeError(f"expected {self.row_type.__name__} rows, got {type(rows[0]).__name__}")
        adapted = []
        for row in rows:
            values = list(row)
            for index, adapt in self.adapters:
                values[index] = adapt(values[index])
            adapted.append(values)
        return adapted

    def insert(self, rows: Sequence[Row]) -> None:
        if not rows:
            return
        values = self._adapt(rows)
        with batch_cursor() as cursor:
            if connection.vendor == "postgresql":
                # COPY: one stream of rows, no statement per row.
                with cursor.copy(self.copy_sql) as copy:
                    for row in values:
                        copy.write_row(row)
            else:
                cursor.executemany(self.insert_sql, values)

    def update(self, rows: Sequence[Row], keys: Sequence[int]) -> None:
        """Set the fields of the rows with these primary keys (same order), but the fixed.

        SQLite rewrites the entries of every index on a column that an UPDATE
        sets, even to the value it had: leaving out the fields that never
        change (a resource's set and URI) halves the cost of updating a row.
        """
        if not rows:
            return
        updated = self.updated
        values = [[row[index] for index in updated] for row in self._adapt(rows)]
        if len(values) != len(keys):
            raise ValueError(f"{len(values)} rows for {len(keys)} keys")
        with batch_cursor() as cursor:
            if connection.vendor == "postgresql":
                # One statement joining one array per column: a statement per
                # row, even pipelined, cost the server several times as much.
                columns = [list(keys), *map(list, zip(*values, strict=True))]
                cursor.execute(self.update_from_arrays_sql, columns, prepare=False)
            else:
                cursor.executemany(
                    self.update_sql, [[*row, key] for row, key in zip(values, keys, strict=True)]
                )


def _update_from_arrays_sql(
    table: str, pk: str, pk_field: models.Field, fields: Sequence[models.Field]
) -> str:
    """`UPDATE … FROM unnest(keys, column arrays…)`: PostgreSQL's one-statement batch update."""
    quote = connection.ops.quote_name
    names = [quote(f"v_{field.column}") for field in fields]
    arrays = ", ".join(f"%b::{field.db_type(connection)}[]" for field in (pk_field, *fields))
    assignments = ", ".join(
        f"{quote(field.column)} = v.{name}" for field, name in zip(fields, names, strict=True)
    )
    # Identifiers come from the model's metadata, quoted; values are parameters.
    return (
        f"UPDATE {table} SET {assignments} "  # noqa: S608
        f"FROM unnest({arrays}) AS v(v_key, {', '.join(names)}) WHERE {table}.{pk} = v.v_key"
    )


@contextmanager
def batch_cursor() -> Iterator[Any]:
    """A cursor for `executemany`, in the current transaction, raising Django's errors.

    On PostgreSQL it binds on the server (psycopg's `Cursor`; Django's binds on
    the client), so values are sent as they are, in a pipeline. Django's
    execute wrappers (query logging) do not see these statements. Its array
    statements pass `prepare=False`: planned per batch as they always were, whatever
    DATABASE_PREPARE_THRESHOLD says (a generic plan for arrays of any length is untested).
    """
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    import psycopg

    connection.ensure_connection()
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        yield cursor


def keys_by_uri(resource_set_id: int, uris: Sequence[str]) -> dict[str, int]:
    """{uri: id} of the set's resources among `uris`, through the (set, uri) unique index."""
    owner, uri, pk = _columns(Resource, "resource_set", "uri", "id")
    return dict(_select_among(Resource, (uri, pk), (owner, resource_set_id), uri, uris))


def known_event_ids(resource_set_id: int, event_ids: Sequence[str]) -> set[str]:
    """The ids among `event_ids` (none empty) that the set's change log already holds."""
    owner, event_id = _columns(Change, "resource_set", "event_id")
    # The partial unique index's own condition, as Django writes it, so the index
    # serves the lookup: SQLite does not see that `<> ''` implies it.
    also = f"NOT ({event_id} = '')"
    rows = _select_among(Change, (event_id,), (owner, resource_set_id), event_id, event_ids, also)
    return {value for (value,) in rows}


def _columns(model: type[models.Model], *names: str) -> list[str]:
    quote = connection.ops.quote_name
    return [quote(concrete_field(model, name).column) for name in names]


def _select_among(
    model: type[models.Model],
    columns: Sequence[str],
    owner: tuple[str, int],
    column: str,
    values: Sequence[str],
    also: str = "TRUE",
) -> list[tuple[Any, ...]]:
    """`SELECT columns … WHERE (owner, column) IN (owner id, each value) AND also`.

    A probe of the (owner, column) index per value, whatever the planner's
    statistics say: with `owner = %s AND column IN (…)` PostgreSQL often scanned
    every row of the set instead. PostgreSQL gets the values as one array
    parameter, bound on the server; SQLite a statement per 2,000 values, under its
    parameter limit. Columns and `also` are quoted identifiers from the models.
    """
    table = connection.ops.quote_name(model._meta.db_table)
    owner_column, owner_id = owner
    select = f"SELECT {', '.join(columns)} FROM {table} WHERE {also} AND "  # noqa: S608
    found: list[tuple[Any, ...]] = []
    with batch_cursor() as cursor:
        if connection.vendor == "postgresql":
            pairs = f"({owner_column}, {column}) IN (SELECT %s::bigint, unnest(%b::text[]))"
            cursor.execute(select + pairs, [owner_id, list(values)], prepare=False)
            return cursor.fetchall()
        for start in range(0, len(values), 2000):
            chunk = values[start : start + 2000]
            among = f"{owner_column} = %s AND {column} IN ({', '.join(['%s'] * len(chunk))})"
            cursor.execute(select + among, [owner_id, *chunk])
            found.extend(cursor.fetchall())
    return found
