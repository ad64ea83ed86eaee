"""The embedded default: entries straight from the database rows.

Reads use one raw keyset query per batch: the ORM's per-value converters
would cost more than rendering the XML.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from functools import partial
from operator import itemgetter
from typing import Any

import orjson
from django.db import connection
from django.db.models import Max, Q, TextField
from django.db.models.functions import Cast

from sitemaps.protocol.records import (
    ChangeRecord,
    Link,
    ResourceBatch,
    ResourceColumns,
    ResourceRecord,
)
from sources.expressions import UtcText
from sources.models import Change, Resource, ResourceSet

from .base import DEFAULT_BATCH_SIZE, BaseGenerator
from .records import w3c_texts


def _datetime(value: Any) -> Any:
    """SQLite hands back naive UTC datetimes, PostgreSQL aware ones."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


#: Builds a NamedTuple from a tuple in C, without the Python frame of its `__new__`.
_new = tuple.__new__


def _links(value: Any) -> tuple[Link, ...]:
    """Links from the `ln` column read as JSON text (a decoded list is taken as it is)."""
    if not value or value == "[]":
        return ()
    return _decoded_links(orjson.loads(value) if isinstance(value, str | bytes) else value)


def _decoded_links(items: list[dict[str, Any]]) -> tuple[Link, ...]:
    """A million-entry list decodes a million of them: the usual single link
    takes no comprehension (a frame of its own in Python 3.11)."""
    if len(items) == 1:
        item = items[0]
        return (_new(Link, (item["rel"], item["uri"], item.get("mime") or "")),)
    return tuple([_new(Link, (item["rel"], item["uri"], item.get("mime") or "")) for item in items])


def _single_link_columns(column: str) -> str:
    """PostgreSQL: `ln` as text only when it is not exactly one link, then that link's fields.

    Writing each row's jsonb out as text took the server 1.8 µs a row and
    decoding it here 1.3 µs more; reading the one link's rel, uri and mime
    with `->>` costs the server 0.5 µs less and needs no decoding
    (bench/README.md). A value that is not an array comes as text, as before.
    """
    first = f"{column}->0"
    return (
        f"CASE WHEN jsonb_typeof({column}) <> 'array' THEN {column}::text "
        f"WHEN jsonb_array_length({column}) = 1 THEN NULL ELSE {column}::text END, "
        f"{first}->>'rel', {first}->>'uri', {first}->>'mime'"
    )


def _records_with_link_columns(
    rows: list[tuple], to_datetime: Callable[[Any], datetime]
) -> Iterator[ResourceRecord]:
    """Rows read with `_single_link_columns`: a lone link comes as its three fields."""
    for key, uri, modified, length, md5, mime, sha256, ln, rel, href, link_type in rows:
        links = _links(ln) if ln is not None else (_new(Link, (rel, href, link_type or "")),)
        record = (key, uri, to_datetime(modified), length, md5, mime, sha256, links)
        yield _new(ResourceRecord, record)


def _records(rows: list[tuple], to_datetime: Callable[[Any], datetime]) -> Iterator[ResourceRecord]:
    """Rows read with `ln` whole (SQLite: its JSON text).

    `ln` is decoded here and the usual single link built in this loop: a call
    less per row, 0.15 µs of the ~8 µs a full run spends on each entry
    (bench/README.md).
    """
    loads = orjson.loads
    for key, uri, modified, length, md5, mime, sha256, ln in rows:
        if not ln or ln == "[]":
            links: tuple[Link, ...] = ()
        else:
            items = loads(ln) if isinstance(ln, str | bytes) else ln
            if len(items) == 1:
                item = items[0]
                links = (_new(Link, (item["rel"], item["uri"], item.get("mime") or "")),)
            else:
                links = _decoded_links(items)
        record = (key, uri, to_datetime(modified), length, md5, mime, sha256, links)
        yield _new(ResourceRecord, record)


def _lastmod_column() -> tuple[str, Callable[[Any], datetime]]:
    """The select expression for `lastmod` and what turns its values into aware datetimes.

    SQLite stores naive UTC text, which Django's converter parses slowly and
    leaves naive: reading it with a `+00:00` appended makes one C call of it.
    PostgreSQL's `timestamptz` goes through Django's Python-level loader (a
    fifth of a page's build): read as UTC text, it is the same one C call.
    """
    column = connection.ops.quote_name(Resource._meta.get_field("lastmod").column)
    template = UtcText.template_for(connection)
    if template is None:
        return column, _datetime
    return template % {"expressions": column}, datetime.fromisoformat


#: The shapes of the `lastmod` texts `_lastmod_column` selects, by their length, digits as 9:
#: SQLite's `YYYY-MM-DD hh:mm:ss[.ffffff]` and PostgreSQL's (its fraction already trimmed),
#: each with the `+00:00` the query appends.
_LASTMOD_SHAPES = {
    length: b"9999-99-99 99:99:99"
    + (b"." + b"9" * (length - 26) if length > 25 else b"")
    + b"+99:99"
    for length in (25, 27, 28, 29, 30, 31, 32)
}


_first = itemgetter(0)
_rel, _uri, _mime = itemgetter("rel"), itemgetter("uri"), itemgetter("mime")


def _json_links(lns: Sequence[str]) -> tuple[list[str], list[str], list[str]] | None:
    """The rel, uri and mime of a batch of `ln` texts that each hold one link, decoded in C.

    orjson and `map` make no Python frame per row. Splitting the batch's
    text on `"` instead made 22 strings a row: more instructions and 50 MiB
    more peak memory in a full run (bench/README.md). None for any other shape.
    """
    decoded = list(map(orjson.loads, lns))
    if set(map(len, decoded)) != {1}:
        return None  # a resource with no link or several
    try:
        links = list(map(_first, decoded))
        return list(map(_rel, links)), list(map(_uri, links)), list(map(_mime, links))
    except (LookupError, TypeError):  # not a list of one link with these keys
        return None


def _json_link_columns(rows: list[tuple]) -> ResourceColumns | None:
    """SQLite: a batch of usual rows as columns."""
    _, uris, lastmods, lengths, md5s, mimes, sha256s, lns = zip(*rows, strict=True)
    count = len(rows)
    if sha256s.count("") != count or (w3c := w3c_texts(lastmods, _LASTMOD_SHAPES)) is None:
        return None
    if lns.count("[]") == count:
        return ResourceColumns(uris, w3c, md5s, lengths, mimes, None, None, None)
    links = _json_links(lns)
    if links is None:
        return None
    rels, hrefs, link_mimes = links
    return ResourceColumns(uris, w3c, md5s, lengths, mimes, rels, hrefs, link_mimes)


def _field_link_columns(rows: list[tuple]) -> ResourceColumns | None:
    """PostgreSQL: a batch of usual rows as columns; a lone link already comes as its fields."""
    _, uris, lastmods, lengths, md5s, mimes, sha256s, lns, rels, hrefs, link_mimes = zip(
        *rows, strict=True
    )
    count = len(rows)
    if sha256s.count("") != count or (w3c := w3c_texts(lastmods, _LASTMOD_SHAPES)) is None:
        return None
    if lns.count(None) == count:
        return ResourceColumns(uris, w3c, md5s, lengths, mimes, rels, hrefs, link_mimes)
    if lns.count("[]") == count:
        return ResourceColumns(uris, w3c, md5s, lengths, mimes, None, None, None)
    return None


def _record_list(
    records: Callable[[list[tuple], Callable[[Any], datetime]], Iterator[ResourceRecord]],
    rows: list[tuple],
    to_datetime: Callable[[Any], datetime],
) -> list[ResourceRecord]:
    """A batch's records, built only when the writer asks for them (a batch it cannot
    write in one pass, or the one a page ends in)."""
    return list(records(rows, to_datetime))


class _ResourceReader:
    """The keyset query over a set's resources, and how its rows become records or columns."""

    def __init__(self) -> None:
        table = connection.ops.quote_name(Resource._meta.db_table)
        lastmod, self.to_datetime = _lastmod_column()
        key_uri = _columns(Resource, ["id", "uri"])
        rest = _columns(Resource, ["length", "md5", "mime", "sha256"])
        ln = _columns(Resource, ["ln"])
        self.records = _records
        self.columns: Callable[[list[tuple]], ResourceColumns | None] = _json_link_columns
        if connection.vendor == "postgresql":
            ln, self.records = _single_link_columns(ln), _records_with_link_columns
            self.columns = _field_link_columns
        # Identifiers come from the model and every value is a parameter.
        self.select = f"SELECT {key_uri}, {lastmod}, {rest}, {ln} FROM {table}"  # noqa: S608

    def batches(
        self, resource_set: ResourceSet, after: int | None, through: int | None, batch_size: int
    ) -> Iterator[list[tuple]]:
        """The rows with keys in (after, through], a batch per round trip."""
        upper = "AND id <= %s " if through is not None else ""
        sql = f"{self.select} WHERE resource_set_id = %s AND id > %s {upper}ORDER BY id LIMIT %s"
        bounds = [through] if through is not None else []
        last = after if after is not None else 0
        while True:
            with connection.cursor() as cursor:
                cursor.execute(sql, [resource_set.pk, last, *bounds, batch_size])
                rows = cursor.fetchall()
            if rows:
                yield rows
            if len(rows) < batch_size:
                return
            last = rows[-1][0]


def _window(since: datetime | None, until: datetime | None, through: int | None = None) -> Q:
    query = Q() if through is None else Q(id__lte=through)
    if since is not None:
        query &= Q(datetime__gte=since)
    if until is not None:
        query &= Q(datetime__lte=until)
    return query


def _columns(model, names: list[str]) -> str:
    quote = connection.ops.quote_name
    return ", ".join(quote(model._meta.get_field(name).column) for name in names)


#: Rows the writer gets at once. A batch's joined text and bytes then stay under glibc's
#: mmap threshold (128 KiB, `forking.map_large_buffers`) and are reused from the heap: the
#: 2,000-row batches of ~600 KB were each mapped anew and faulted in page by page, 380,000
#: minor faults in a full run of 1,000,000 against main's 140,000 (bench/README.md).
WRITTEN_ROWS = 250


class DatabaseGenerator(BaseGenerator):
    name = "database"

    def iter_resources(
        self,
        resource_set: ResourceSet,
        *,
        after: int | None = None,
        through: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Iterator[ResourceRecord]:
        reader = _ResourceReader()
        for rows in reader.batches(resource_set, after, through, batch_size):
            yield from reader.records(rows, reader.to_datetime)

    def iter_resource_batches(
        self,
        resource_set: ResourceSet,
        *,
        after: int | None = None,
        through: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Iterator[ResourceBatch]:
        """A query's rows in batches of `WRITTEN_ROWS`, each with its columns when usual."""
        reader = _ResourceReader()
        for fetched in reader.batches(resource_set, after, through, batch_size):
            for start in range(0, len(fetched), WRITTEN_ROWS):
                rows = fetched[start : start + WRITTEN_ROWS]
                records = partial(_record_list, reader.records, rows, reader.to_datetime)
                last = next(reader.records(rows[-1:], reader.to_datetime))
                yield ResourceBatch(len(rows), records, last, reader.columns(rows))

    def iter_changes(
        self,
        resource_set: ResourceSet,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        after: tuple[datetime, int] | None = None,
        through: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Iterator[ChangeRecord]:
        # Datetimes as UTC text and links as JSON text: Django's loaders and JSONField
        # decoding cost more than the rest of a Change List entry (bench/README.md, session 10).
        window = _window(since, until, through)
        rows = Change.objects.filter(window, resource_set=resource_set).annotate(
            datetime_utc=UtcText("datetime"),
            lastmod_utc=UtcText("lastmod"),
            ln_text=Cast("ln", output_field=TextField()),
        )
        names = (
            "id", "resource_key", "uri", "change", "datetime_utc", "lastmod_utc",
            "length", "md5", "mime", "sha256", "ln_text",
        )  # fmt: skip
        while True:
            page = rows
            if after is not None:
                moment, key = after
                page = rows.filter(Q(datetime__gt=moment) | Q(datetime=moment, id__gt=key))
            batch = list(page.order_by("datetime", "id").values_list(*names)[:batch_size])
            record = None
            for key, resource_key, uri, change, moment, lastmod, size, md5, mime, sha, ln in batch:
                record = ChangeRecord(
                    key,
                    resource_key or 0,
                    uri,
                    change,
                    datetime.fromisoformat(moment),
                    None if lastmod is None else datetime.fromisoformat(lastmod),
                    size,
                    md5,
                    mime,
                    sha,
                    _links(ln),
                )
                yield record
            if len(batch) < batch_size or record is None:
                return
            after = (record.datetime, record.key)

    def count_resources(self, resource_set: ResourceSet) -> int:
        return Resource.objects.filter(resource_set=resource_set).count()

    def last_changed(self, resource_set: ResourceSet) -> datetime | None:
        return Change.objects.filter(resource_set=resource_set).aggregate(last=Max("datetime"))[
            "last"
        ]
