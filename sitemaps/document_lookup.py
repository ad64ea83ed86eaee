"""Find a served document with its set, provider and capabilities in one prepared query.

Serving is the hot path: gunicorn sends a stored 50,000-entry page with
sendfile, but the ORM spent about 1.5 ms of CPU compiling the three-join,
45-column `select_related` query that finds it, half of the whole request
(bench item 4, gunicorn alone). Here the SQL is written once per document
model and lookup, from the models' own metadata, and each row goes through
the converters the ORM itself would apply, so the instances are the ones
`select_related("resource_set__provider", "resource_set__capability_settings")`
returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

from sources.models import CapabilitySettings, DataProvider, ResourceSet

from .models import StoredDocument

Document = TypeVar("Document", bound=StoredDocument)
Row = TypeVar("Row", bound=models.Model)
Converter = Callable[[Any, Any, Any], Any]

#: (alias, model, join condition) of every table after the document's own (`d`).
_JOINS: tuple[tuple[str, type[models.Model], str], ...] = (
    ("s", ResourceSet, "INNER JOIN {table} s ON s.{id} = d.{resource_set_id}"),
    ("p", DataProvider, "INNER JOIN {table} p ON p.{id} = s.{provider_id}"),
    ("c", CapabilitySettings, "LEFT OUTER JOIN {table} c ON c.{resource_set_id} = s.{id}"),
)


def find_document(
    model: type[Document],
    *,
    provider: str,
    set_slug: str,
    where: Mapping[str, object],
    latest: bool = False,
) -> Document | None:
    """The document of an active provider's set matching `where` (field: value, None: IS NULL).

    `latest` takes the highest `number` when several match (the open Change List).
    """
    # The connection itself, not the `connection` proxy: each attribute read through that
    # costs a thread-local lookup, and building the instances reads dozens.
    db = connections[DEFAULT_DB_ALIAS]
    tests = tuple((name, value is None) for name, value in where.items())
    sql = _sql(model, tests, latest, db.vendor)
    # Named parameters: Django's SQLite cursor turns `%s` into `?` with a regular
    # expression over the whole (1 kB) statement, as long as running it; names it
    # substitutes with `%` formatting. PostgreSQL takes either.
    params: dict[str, Any] = {"provider": provider, "active": True, "set_slug": set_slug}
    params.update((f"d_{name}", value) for name, value in where.items() if value is not None)
    with _cursor(db) as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return None if row is None else _instances(db, model, row)


def _cursor(db: BaseDatabaseWrapper) -> Any:
    """Django's cursor; on PostgreSQL one that binds on the server, so that psycopg
    prepares the lookup once it ran `prepare_threshold` times on the kept connection.

    PostgreSQL planned the four-table join on every request, five times as long as
    running it (bench/README.md, s7-djview). Django's own cursors bind on the client
    and never prepare; this one is still Django's wrapper (errors, query logging).
    """
    if db.vendor != "postgresql":
        return db.cursor()
    import psycopg  # as sources/bulk.py: only PostgreSQL needs it

    db.ensure_connection()
    cursor = psycopg.Cursor(db.connection)
    # What `db.cursor()` wraps its own in: query logging, execute wrappers, Django's errors.
    wrapper = CursorDebugWrapper if db.queries_logged else CursorWrapper
    return wrapper(cursor, db)


@cache
def _sql(
    model: type[StoredDocument], tests: tuple[tuple[str, bool], ...], latest: bool, vendor: str
) -> str:
    """The query for one model and set of tests ((field, is null)); the same for every call."""
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    tables = (("d", model), *((alias, joined) for alias, joined, _ in _JOINS))
    columns = ", ".join(
        f"{alias}.{quote(field.column)}" for alias, table in tables for field in _fields(table)
    )
    joins = " ".join(
        join.format(
            table=quote(joined._meta.db_table),
            id=quote("id"),
            resource_set_id=quote("resource_set_id"),
            provider_id=quote("provider_id"),
        )
        for _, joined, join in _JOINS
    )
    conditions = [
        f"p.{quote('slug')} = %(provider)s",
        f"p.{quote('active')} = %(active)s",
        f"s.{quote('slug')} = %(set_slug)s",
    ]
    for name, is_null in tests:
        field = model._meta.get_field(name)
        assert isinstance(field, models.Field), name  # a column of the document's own table
        column = quote(field.column)
        conditions.append(f"d.{column} IS NULL" if is_null else f"d.{column} = %(d_{name})s")
    # Identifiers from the models' metadata, quoted; every value is a bound parameter.
    sql = f"SELECT {columns} FROM {quote(model._meta.db_table)} d {joins} WHERE "  # noqa: S608
    sql += " AND ".join(conditions)
    order = f" ORDER BY d.{quote('number')} DESC" if latest else ""
    return sql + order + " LIMIT 1"


def _fields(model: type[models.Model]) -> Sequence[models.Field]:
    return model._meta.concrete_fields


def _converters(
    db: BaseDatabaseWrapper, model: type[models.Model]
) -> tuple[tuple[int, list[Converter], Any], ...]:
    return _converters_for(model, db.vendor)


@cache
def _converters_for(
    model: type[models.Model], vendor: str
) -> tuple[tuple[int, list[Converter], Any], ...]:
    """(position, converters, column) of the fields whose values the ORM converts on read.

    Found once per backend, as the ORM's compiler finds them for every query.
    """
    db = connections[DEFAULT_DB_ALIAS]
    found = []
    for position, field in enumerate(_fields(model)):
        column = field.get_col(model._meta.db_table)
        converters = db.ops.get_db_converters(column) + column.get_db_converters(db)
        if converters:
            found.append((position, converters, column))
    return tuple(found)


def _instance(db: BaseDatabaseWrapper, model: type[Row], values: Sequence[Any]) -> Row:
    """A model instance from its columns' raw values, converted as the ORM converts them."""
    converted = list(values)
    for position, converters, column in _converters(db, model):
        value = converted[position]
        for converter in converters:
            value = converter(value, column, db)
        converted[position] = value
    return model.from_db(db.alias, _attnames(model), converted)


@cache
def _attnames(model: type[models.Model]) -> tuple[str, ...]:
    return tuple(field.attname for field in _fields(model))


def _instances(db: BaseDatabaseWrapper, model: type[Document], row: Sequence[Any]) -> Document:
    """Split the row into the four instances and link them as select_related would."""
    parts = []
    start = 0
    for table in (model, ResourceSet, DataProvider, CapabilitySettings):
        width = len(_fields(table))
        parts.append(row[start : start + width])
        start += width
    document = _instance(db, model, parts[0])
    resource_set = _instance(db, ResourceSet, parts[1])
    provider = _instance(db, DataProvider, parts[2])
    # No settings row (LEFT JOIN): None, which `ResourceSet.capabilities` turns into defaults.
    capabilities = None if parts[3][0] is None else _instance(db, CapabilitySettings, parts[3])
    # Into the caches, as select_related does (the ids already match: no descriptor needed).
    ResourceSet.provider.field.set_cached_value(resource_set, provider)
    ResourceSet.capability_settings.related.set_cached_value(resource_set, capabilities)
    if capabilities is not None:
        CapabilitySettings.resource_set.field.set_cached_value(capabilities, resource_set)
    model.resource_set.field.set_cached_value(document, resource_set)
    return document
