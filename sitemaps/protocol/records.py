"""The records documents are built from: what a generator yields, in key order."""

from __future__ import annotations

import datetime as dt
from typing import NamedTuple

# Records are NamedTuples: immutable, typed, and cheap to build a million times.


class Link(NamedTuple):
    """One `<rs:ln>`: href is already resolved to an absolute URI."""

    rel: str
    href: str
    mime: str = ""


class ResourceRecord(NamedTuple):
    """The current state of one resource, as a Resource List entry shows it."""

    key: int
    uri: str
    lastmod: dt.datetime
    length: int
    md5: str
    mime: str
    sha256: str = ""
    links: tuple[Link, ...] = ()


class ChangeRecord(NamedTuple):
    """One logged change, as a Change List entry shows it.

    `key` is the change's own id; `resource_key` the resource it touched.
    Deleted changes may lack lastmod, length, md5 and mime.
    """

    key: int
    resource_key: int
    uri: str
    change: str
    datetime: dt.datetime
    lastmod: dt.datetime | None = None
    length: int | None = None
    md5: str = ""
    mime: str = ""
    sha256: str = ""
    links: tuple[Link, ...] = ()
