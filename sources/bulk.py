"""Batch writes with `executemany`, for the ingestion hot path.

The ORM's bulk_create prepares every value through several layers (about
20 µs each), which caps ingestion near 1,000 events/s; here each column gets
its backend's adapter once and the driver runs one prepared statement.

On PostgreSQL the statement runs on a cursor that binds values on the
server: Django's own cursor binds them on the client, quoting every value
in Python, which was three quarters of an event's write time there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Generic, NamedTuple, TypeVar

import orjson
from django.db import connection, models
from psycopg.types.json import Jsonb  # in the requirements; only PostgreSQL uses it

from .models import Resource

Adapter = Callable[[Any], Any]
Row = TypeVar("Row", bound=NamedTuple)


def _sqlite_datetime(value: datetime | None) -> str | None:
    """What Django's SQLite adapter stores (naive UTC text), without its layers."""
    if value is None:
        return None
    if value.tzinfo is UTC:
        value = value.replace(tzinfo=None)
    elif value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return str(value)


def _sqlite_json(value: Any) -> str:
    """Compact JSON text; orjson is several times faster than the json module."""
    return orjson.dumps(value).decode()


def _postgres_json(value: Any) -> Any:
    """A jsonb parameter serialised by orjson (the stored jsonb is the same)."""
    return Jsonb(value, dumps=orjson.dumps)


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
            return _postgres_json
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

    def __init__(self, model: type[models.Model], row_type: type[Row]) -> None:
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
        assignments = ", ".join(f"{column} = %s" for column in columns)
        self.update_sql = f"UPDATE {table} SET {assignments} WHERE {quote(meta.pk.column)} = %s"  # noqa: S608

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
        """Set the fields of the rows with these primary keys (same order)."""
        if rows:
            values = self._adapt(rows)
            with batch_cursor() as cursor:
                cursor.executemany(
                    self.update_sql,
                    [[*row, key] for row, key in zip(values, keys, strict=True)],
                )


@contextmanager
def batch_cursor() -> Iterator[Any]:
    """A cursor for `executemany`, in the current transaction, raising Django's errors.

    On PostgreSQL it binds on the server (psycopg's `Cursor`; Django's binds on
    the client), so values are sent as they are, in a pipeline. Django's
    execute wrappers (query logging) do not see these statements.
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
    """{uri: id} of the set's resources among `uris`: one plain query per 2,000."""
    meta = Resource._meta
    quote = connection.ops.quote_name
    found: dict[str, int] = {}
    for start in range(0, len(uris), 2000):
        chunk = uris[start : start + 2000]
        uri, owner = (
            quote(concrete_field(Resource, name).column) for name in ("uri", "resource_set")
        )
        # Identifiers come from the model's metadata, quoted; values are parameters.
        sql = (
            f"SELECT {uri}, {quote(meta.pk.column)} FROM {quote(meta.db_table)} "  # noqa: S608
            f"WHERE {owner} = %s AND {uri} IN ({', '.join(['%s'] * len(chunk))})"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [resource_set_id, *chunk])
            found.update(cursor.fetchall())
    return found
