"""Turn Elasticsearch `_source` documents into generator records.

The database generator builds the same records from its rows; the
behaviour suite asserts both give identical records and documents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

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
