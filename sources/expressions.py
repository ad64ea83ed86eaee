"""Two SQL expressions for the hot read paths, on SQLite and PostgreSQL.

- `AnyOf`: a key among many, sent as one parameter. The Elasticsearch mirror
  reads its rows by key, two thousand at a time; with `pk__in` Django compiles
  and binds one parameter per key, and psycopg splits the resulting statement
  (too long for its cache) on every execute.
- `UtcText`: a datetime column as UTC ISO text. Django reads PostgreSQL's
  `timestamptz` through a Python-level loader and SQLite's text through a
  Python parser; `datetime.fromisoformat` on the text is one C call.

Together they were about a third of the mirror's CPU per change on PostgreSQL
(bench/README.md, session 10).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, ClassVar

import orjson
from django.core.exceptions import EmptyResultSet
from django.db import NotSupportedError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Expression, F, Func, Lookup, TextField
from django.db.models.sql.compiler import SQLCompiler


class AnyOf(Lookup):
    """`filter(AnyOf("pk", keys))`: the rows whose integer `field` is one of `keys`."""

    prepare_rhs = False

    def __init__(self, field: str | Expression, keys: Iterable[int]) -> None:
        # Integers, so that json_each yields integers and psycopg sends an integer array.
        super().__init__(F(field) if isinstance(field, str) else field, [int(k) for k in keys])

    def _column(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> Any:
        if not self.rhs:
            raise EmptyResultSet  # as `__in=[]`: no query at all
        return self.process_lhs(compiler, connection)

    def as_sql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> Any:
        lhs, params = self._column(compiler, connection)
        return f"{lhs} IN ({', '.join(['%s'] * len(self.rhs))})", [*params, *self.rhs]

    def as_sqlite(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> Any:
        lhs, params = self._column(compiler, connection)
        keys = orjson.dumps(self.rhs).decode()
        # `lhs` is the compiled column; the keys are one bound parameter.
        return f"{lhs} IN (SELECT value FROM json_each(%s))", [*params, keys]  # noqa: S608

    def as_postgresql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> Any:
        lhs, params = self._column(compiler, connection)
        return f"{lhs} = ANY(%s)", [*params, self.rhs]


class UtcText(Func):
    """A datetime column as `YYYY-MM-DD hh:mm:ss[.ffffff]+00:00`, its UTC time.

    SQLite stores naive UTC text; PostgreSQL's text of a `timestamp` trims the
    fraction's zeros. `datetime.fromisoformat` reads both. PostgreSQL writes
    that text in its ISO `DateStyle`, the only one psycopg (so Django) reads
    `timestamptz` in at all.
    """

    output_field = TextField()
    templates: ClassVar[dict[str, str]] = {
        "sqlite": "%(expressions)s || '+00:00'",
        "postgresql": "(%(expressions)s AT TIME ZONE 'UTC')::text || '+00:00'",
    }

    @staticmethod
    def isoformat(text: str) -> str:
        """`datetime.fromisoformat(text).isoformat()`, by slicing where the shape allows.

        Whole seconds and six-digit fractions (SQLite's text, and PostgreSQL's
        but when it trims a fraction's zeros) differ from `isoformat()` only by
        the "T". Parsing and formatting were 6-8 of the 21-23 µs the mirror
        spent reading a change and its resource.
        """
        if len(text) in (25, 32) and text[10] == " ":
            return f"{text[:10]}T{text[11:]}"
        return datetime.fromisoformat(text).isoformat()

    @classmethod
    def template_for(cls, connection: BaseDatabaseWrapper) -> str | None:
        """The SQL template on this connection; None where it would not give UTC.

        SQLite's text is in the connection's time zone: UTC unless DATABASES sets
        one. `sources.generators.database` writes its own SQL with it too.
        """
        if connection.vendor == "sqlite" and connection.timezone_name != "UTC":
            return None
        return cls.templates.get(connection.vendor)

    def as_sql(  # type: ignore[override]
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> Any:
        template = self.template_for(connection)
        if template is None:
            raise NotSupportedError(f"UtcText needs UTC text, which {connection.vendor} lacks here")
        return super().as_sql(compiler, connection, template=template, **extra)
