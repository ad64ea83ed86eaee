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
from typing import Any

import orjson

from sitemaps.protocol.records import ChangeRecord, Link, ResourceRecord


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
