"""Turn Elasticsearch hits into generator records.

A hit's fields come from doc values (`fields`, each a list of one value, the
links as `ln_values`), or, from indices older than mapping version 3, from
its `_source`.

The database generator builds the same records from its rows; the
behaviour suite asserts both give identical records and documents.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from datetime import datetime
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


def link_values_from(values: list[str] | None) -> tuple[Link, ...]:
    """The links from `ln_values` (base64 JSON of `[[rel, uri, mime], ...]`)."""
    if not values:
        return ()
    return tuple([_record(Link, row) for row in orjson.loads(base64.b64decode(values[0]))])


_NONE = [None]
_EMPTY = [""]


def resource_record_from_fields(fields: Mapping[str, list[Any]]) -> ResourceRecord:
    """Doc values in the order of ResourceRecord, as `resource_record` reads `_source`."""
    return _record(
        ResourceRecord,
        (
            fields["key"][0],
            fields["uri"][0],
            _parse_instant(fields["lastmod"][0]),
            fields["length"][0],
            fields["md5"][0],
            fields["mime"][0],
            fields.get("sha256", _EMPTY)[0],
            link_values_from(fields.get("ln_values")),
        ),
    )


def change_record_from_fields(fields: Mapping[str, list[Any]]) -> ChangeRecord:
    """Doc values in the order of ChangeRecord, as `change_record` reads `_source`."""
    lastmod = fields.get("lastmod", _NONE)[0]
    return _record(
        ChangeRecord,
        (
            fields["key"][0],
            fields.get("resource_key", _NONE)[0] or 0,
            fields["uri"][0],
            fields["change"][0],
            _parse_instant(fields["datetime"][0]),
            _parse_instant(lastmod) if lastmod is not None else None,
            fields.get("length", _NONE)[0],
            fields.get("md5", _EMPTY)[0],
            fields.get("mime", _EMPTY)[0],
            fields.get("sha256", _EMPTY)[0],
            link_values_from(fields.get("ln_values")),
        ),
    )
