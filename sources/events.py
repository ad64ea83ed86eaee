"""The validated form of one event posted by the harvester (DIT)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class LinkData:
    """An `ln` entry as posted: href keeps its location type until resolved."""

    rel: str
    href_type: str
    href_value: str
    mime: str = ""
    uri: str = ""

    def as_json(self) -> dict[str, object]:
        """The stored form, shared by the database row and the Elasticsearch mirror."""
        return {
            "rel": self.rel,
            "href": {"type": self.href_type, "value": self.href_value},
            "mime": self.mime,
            "uri": self.uri,
        }


@dataclass(frozen=True, slots=True)
class Event:
    """One created/updated/deleted event, validated field by field.

    `uri` and each link's `uri` are already resolved by `sources.locations`.
    """

    change: str
    location_type: str
    location_value: str
    uri: str
    length: int | None = None
    md5: str = ""
    sha256: str = ""
    mime: str = ""
    lastmod: datetime | None = None
    links: tuple[LinkData, ...] = field(default=())
    datetime: datetime | None = None
    id: str = ""
