"""Turn Elasticsearch hits into generator records.

A hit's fields come from its `record` doc value, or, from indices older than
mapping version 3, from its `_source`.

The database generator builds the same records from its rows; the
behaviour suite asserts both give identical records and documents.
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import partial
from itertools import compress, repeat
from operator import itemgetter
from typing import Any

import orjson

from sitemaps.protocol.records import (
    ChangeRecord,
    Link,
    ResourceBatch,
    ResourceColumns,
    ResourceRecord,
)


def as_datetime(value: datetime | str | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


#: A NamedTuple built from a tuple skips its Python-level `__new__`: a page
#: builds one record (and one link) per entry, a million in a full run.
_record = tuple.__new__
_parse_instant = datetime.fromisoformat
#: `base64.b64decode` without its Python-level checks: a tenth of a hit's decoding.
_decode = binascii.a2b_base64


def links_from(ln: Sequence[Mapping[str, Any]] | None) -> tuple[Link, ...]:
    if not ln:
        return ()
    return tuple([_record(Link, (item["rel"], item["uri"], item.get("mime") or "")) for item in ln])


def resource_record(source: Mapping[str, Any]) -> ResourceRecord:
    """`_source` fields in the order of ResourceRecord; `lastmod` is always set."""
    return _record(
        ResourceRecord,
        (
            source["key"],
            source["uri"],
            _parse_instant(source["lastmod"]),
            source["length"],
            source["md5"],
            source["mime"],
            source.get("sha256") or "",
            links_from(source.get("ln")),
        ),
    )


def change_record(source: Mapping[str, Any]) -> ChangeRecord:
    """`_source` fields in the order of ChangeRecord; a deletion may lack its metadata."""
    lastmod = source.get("lastmod")
    return _record(
        ChangeRecord,
        (
            source["key"],
            source.get("resource_key") or 0,
            source["uri"],
            source["change"],
            _parse_instant(source["datetime"]),
            _parse_instant(lastmod) if lastmod is not None else None,
            source.get("length"),
            source.get("md5") or "",
            source.get("mime") or "",
            source.get("sha256") or "",
            links_from(source.get("ln")),
        ),
    )


#: A link from its (rel, uri, mime) row, in C: `map` over it makes no frame a link.
_link = partial(_record, Link)


def _links(rows: list[list[str]]) -> tuple[Link, ...]:
    return tuple(map(_link, rows)) if rows else ()


def resource_record_from_value(value: str | bytes) -> ResourceRecord:
    """A `record` doc value (`documents.record_value`) as `resource_record` reads `_source`."""
    fields = orjson.loads(_decode(value))
    fields[2] = _parse_instant(fields[2])
    fields[6] = fields[6] or ""
    fields[7] = _links(fields[7])
    return _record(ResourceRecord, fields)


def change_record_from_value(value: str) -> ChangeRecord:
    """A `record` doc value (`documents.record_value`) as `change_record` reads `_source`."""
    fields = orjson.loads(_decode(value))
    fields[1] = fields[1] or 0
    fields[4] = _parse_instant(fields[4])
    if fields[5] is not None:
        fields[5] = _parse_instant(fields[5])
    fields[7:10] = [text or "" for text in fields[7:10]]
    fields[10] = _links(fields[10])
    return _record(ChangeRecord, fields)


def resource_records_from_values(values: Sequence[bytes]) -> list[ResourceRecord]:
    return list(map(resource_record_from_value, values))


def resource_batch_from_values(values: Sequence[bytes]) -> ResourceBatch:
    """A batch of `record` doc values: records on demand, and columns when they are usual.

    The columns are read from the values without a record or a datetime a
    hit: 29 k instructions an entry with `resource_urls`, against 40 k for
    records and `resource_url` (bench/README.md, s8-esbatch).
    """
    last = resource_record_from_value(values[-1])
    records = partial(resource_records_from_values, values)
    return ResourceBatch(len(values), records, last, resource_columns_from_values(values))


def resource_columns_from_values(values: Sequence[bytes]) -> ResourceColumns | None:
    """`record` doc values of usual resources (no sha256, one link each or none) as columns.

    Decoded as one JSON array, in C. None for any other batch: its records
    are then written one by one.
    """
    rows = orjson.loads(b"[" + b",".join(map(_decode, values)) + b"]")
    try:
        _, uris, lastmods, lengths, md5s, mimes, sha256s, lns = zip(*rows, strict=True)
        counts = set(map(len, lns))
    except (TypeError, ValueError):  # not rows of a resource's eight fields
        return None
    if any(sha256s) or (w3c := w3c_lastmods(lastmods)) is None:
        return None
    if counts == {0}:
        return ResourceColumns(uris, w3c, md5s, lengths, mimes, None, None, None)
    if counts != {1}:
        return None
    try:
        rels, hrefs, link_mimes = zip(*map(_first, lns), strict=True)
    except (TypeError, ValueError):  # a link not of (rel, uri, mime)
        return None
    return ResourceColumns(uris, w3c, md5s, lengths, mimes, rels, hrefs, link_mimes)


_first = itemgetter(0)
#: `isoformat()` of an aware datetime in UTC, with and without microseconds, digits as 9.
_ISO_SHAPES = {
    len(shape): shape
    for shape in (b"9999-99-99T99:99:99+99:99", b"9999-99-99T99:99:99.999999+99:99")
}
_DIGITS_AS_9 = bytes.maketrans(b"0123456789", b"9" * 10)
_UTC = "+00:00"


def w3c_texts(texts: Sequence[str], shapes: Mapping[int, bytes]) -> list[str] | None:
    """Stored UTC datetime texts as `w3c_datetime` writes them, by text operations on the batch.

    Parsing each into a datetime and formatting it again was a seventh of an
    entry's time (bench/README.md). `shapes` are the texts' shapes by length,
    digits as 9, each ending in `+99:99`. The shapes are checked at once, the
    date and time joined by `T`, `Z` put for the offset, and fractions trimmed
    of their zeros only where they end in one. None when a text is of
    another shape or not in UTC.
    """
    try:
        expected = b"\n".join(map(shapes.__getitem__, map(len, texts)))
        text = "\n".join(texts)
    except (KeyError, TypeError):  # another shape, or not a text
        return None
    if text.encode().translate(_DIGITS_AS_9) != expected or text.count(_UTC) != len(texts):
        return None
    w3c = text.replace(" ", "T").replace(_UTC, "Z").split("\n")
    for row in compress(range(len(w3c)), map(str.endswith, w3c, repeat("0Z"))):
        value = w3c[row]
        if len(value) > 20:  # a fraction ending in zero
            fraction = value[19:-1].rstrip("0")
            if fraction == ".":
                return None  # no store writes a fraction of zeros
            w3c[row] = f"{value[:19]}{fraction}Z"
    return w3c


def w3c_lastmods(texts: Sequence[str]) -> list[str] | None:
    """`lastmod` texts the mirror wrote (`isoformat()`) as `w3c_datetime` writes them."""
    return w3c_texts(texts, _ISO_SHAPES)
