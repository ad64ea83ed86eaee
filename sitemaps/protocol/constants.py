"""Names, limits and time format shared by every ResourceSync document we publish."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum

#: Default namespace of `<urlset>` and `<sitemapindex>` documents.
SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
#: The ResourceSync namespace; the trailing slash is part of it.
RS_NS = "http://www.openarchives.org/rs/terms/"

#: A urlset or sitemapindex holds at most this many entries and this many bytes uncompressed;
#: beyond either a list is split under an index. https://www.sitemaps.org/protocol.html
MAX_ENTRIES_PER_DOCUMENT = 50_000
MAX_DOCUMENT_BYTES = 50 * 1024 * 1024


class Capability(StrEnum):
    """Values of `rs:md capability`; an index carries the same value as its parts."""

    DESCRIPTION = "description"
    CAPABILITY_LIST = "capabilitylist"
    RESOURCE_LIST = "resourcelist"
    CHANGE_LIST = "changelist"
    RESOURCE_DUMP = "resourcedump"
    CHANGE_DUMP = "changedump"
    RESOURCE_DUMP_MANIFEST = "resourcedump-manifest"
    CHANGE_DUMP_MANIFEST = "changedump-manifest"
    CHANGE_NOTIFICATION = "change-notification"
    FRAMEWORK_NOTIFICATION = "framework-notification"
    RESOURCE_LIST_ARCHIVE = "resourcelist-archive"
    RESOURCE_DUMP_ARCHIVE = "resourcedump-archive"
    CHANGE_LIST_ARCHIVE = "changelist-archive"
    CHANGE_DUMP_ARCHIVE = "changedump-archive"


class ChangeType(StrEnum):
    """Values of `rs:md change` (the XSD enumerates exactly these)."""

    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"

    @classmethod
    def choices(cls) -> list[tuple[str, str]]:
        """(value, label) pairs for Django model and form fields."""
        return [(change.value, change.value.capitalize()) for change in cls]


# Two-digit strings and a small cache of date prefixes: formatting by lookup is
# several times faster than isoformat() on an aware datetime, and lists have a
# million of them.
_TWO_DIGITS = tuple(f"{number:02d}" for number in range(60))
_DATE_PREFIXES: dict[int, str] = {}
_DATE_PREFIXES_SIZE = 4096


def w3c_datetime(value: datetime) -> str:
    """Format an aware datetime as W3C Datetime in UTC: `YYYY-MM-DDThh:mm:ss[.f]Z`.

    A time without a zone is ambiguous and invalid in ResourceSync, so naive
    datetimes raise ValueError. Fractional seconds appear only when non-zero,
    trimmed of trailing zeros, so whole-second times stay short.
    """
    if not isinstance(value, datetime):
        raise TypeError(f"expected a datetime, got {type(value).__name__}")
    if value.tzinfo is not UTC:
        offset = value.utcoffset()
        if offset is None:
            raise ValueError(f"naive datetime {value!r}: ResourceSync times need a zone")
        if offset:
            value = value.astimezone(UTC)
    day = value.toordinal()
    prefix = _DATE_PREFIXES.get(day)
    if prefix is None:
        prefix = value.date().isoformat() + "T"
        if len(_DATE_PREFIXES) >= _DATE_PREFIXES_SIZE:
            _DATE_PREFIXES.clear()
        _DATE_PREFIXES[day] = prefix
    two = _TWO_DIGITS
    clock = f"{prefix}{two[value.hour]}:{two[value.minute]}:{two[value.second]}"
    if value.microsecond:
        # 1_000_000 + µs gives the six digits with their leading zeros, without a format spec.
        return f"{clock}.{str(1_000_000 + value.microsecond)[1:].rstrip('0')}Z"
    return f"{clock}Z"
