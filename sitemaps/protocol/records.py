"""The records documents are built from: what a generator yields, in key order."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, islice
from typing import NamedTuple, cast

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


class ResourceColumns(NamedTuple):
    """A batch of usual resources (md5, no sha256, one typed link each, or none), as columns.

    `lastmods` are W3C Datetime text already; `rels`, `hrefs` and `mimes` are
    None when no resource of the batch has a link.
    """

    uris: Sequence[str]
    lastmods: Sequence[str]
    md5s: Sequence[str]
    lengths: Sequence[int]
    mimes: Sequence[str]
    rels: Sequence[str] | None
    hrefs: Sequence[str] | None
    link_mimes: Sequence[str] | None


class ResourceBatch(NamedTuple):
    """Consecutive resources a generator read at once, in key order.

    `records()` gives them as ResourceRecords; `columns`, when the generator
    could read every one of them in the usual shape, the same values as
    columns, so the writer can write the batch in one pass. `last` is the
    batch's last record (where a page that ends with it stopped).
    """

    size: int
    records: Callable[[], Sequence[ResourceRecord]]
    last: ResourceRecord
    columns: ResourceColumns | None = None


#: Records per batch when a generator gives them one by one.
RECORD_BATCH_SIZE = 5_000


def record_batches(
    records: Iterable[ResourceRecord], size: int = RECORD_BATCH_SIZE
) -> Iterator[ResourceBatch]:
    """Records in batches without columns: each is written record by record."""
    iterator = iter(records)
    while chunk := list(islice(iterator, size)):
        yield ResourceBatch(len(chunk), chunk.copy, chunk[-1])


def batched(
    resources: Iterable[ResourceRecord] | Iterable[ResourceBatch],
) -> Iterator[ResourceBatch]:
    """Batches as they are, records in batches."""
    iterator = iter(resources)
    first = next(iterator, None)
    if first is None:
        return
    rest = chain([first], iterator)
    if isinstance(first, ResourceBatch):
        yield from cast(Iterator[ResourceBatch], rest)
    else:
        yield from record_batches(cast(Iterator[ResourceRecord], rest))
