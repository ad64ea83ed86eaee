"""Turn stored rows (database or Elasticsearch source) into generator records.

Both backends go through these two functions, which is what makes their
documents byte-identical.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .base import ChangeRecord, Link, ResourceRecord


def as_datetime(value: datetime | str | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


def links_from(ln: Sequence[Mapping[str, Any]] | None) -> tuple[Link, ...]:
    return tuple(Link(rel=item["rel"], href=item["uri"], mime=item.get("mime") or "") for item in ln or ())


def resource_record(row: Mapping[str, Any]) -> ResourceRecord:
    """Build a record from a mapping with the Resource field names (`key` = id)."""
    return ResourceRecord(
        key=row["key"],
        uri=row["uri"],
        lastmod=as_datetime(row["lastmod"]),  # type: ignore[arg-type]
        length=row["length"],
        md5=row["md5"],
        mime=row["mime"],
        sha256=row.get("sha256") or "",
        links=links_from(row.get("ln")),
    )


def change_record(row: Mapping[str, Any]) -> ChangeRecord:
    """Build a record from a mapping with the Change field names (`key` = id)."""
    return ChangeRecord(
        key=row["key"],
        resource_key=row.get("resource_key") or 0,
        uri=row["uri"],
        change=row["change"],
        datetime=as_datetime(row["datetime"]),  # type: ignore[arg-type]
        lastmod=as_datetime(row.get("lastmod")),
        length=row.get("length"),
        md5=row.get("md5") or "",
        mime=row.get("mime") or "",
        sha256=row.get("sha256") or "",
        links=links_from(row.get("ln")),
    )
