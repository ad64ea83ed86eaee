"""Change List retention: the index keeps the newest closed lists, older ones are archived.

A set's `changelist_keep` (CapabilitySettings; empty keeps all) bounds the
Change List Index to that many closed lists plus the open one. Older closed
lists move to the Change List Archive, `changelist-archive.xml` (spec §6):
a urlset with capability `changelist-archive`, an `up` link to the Capability
List and one entry per archived list, oldest first, with its `from` and
`until`. The index links to it with `rel="archives"` and the Capability List
lists it. Archived lists stay stored and served at their own URLs and are
never rewritten (they keep the `index` link they were written with).

Regeneration calls `retain` once, just before it writes the index.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from sources.models import ResourceSet

from . import links, publishing
from .models import ChangeListPage, IndexDocument
from .protocol.builders import DocumentTooLarge, PageBuilder
from .protocol.constants import Capability, w3c_datetime
from .protocol.writer import DocumentWriter
from .storage import delete_document

if TYPE_CHECKING:
    from .regeneration import RegenerationRun

KIND = IndexDocument.Kind.CHANGE_LIST_ARCHIVE


@dataclass(frozen=True, slots=True)
class ArchivedList:
    """One archived Change List as its archive entry shows it."""

    loc: str
    since: datetime
    until: datetime
    lastmod: datetime | None = None


def build_change_list_archive(lists: Iterable[ArchivedList], *, capability_list_url: str) -> bytes:
    """A Change List Archive: closed lists oldest first, each with `from` and `until`."""
    writer = DocumentWriter("urlset")
    header = writer.start(
        {"capability": Capability.CHANGE_LIST_ARCHIVE}, [{"rel": "up", "href": capability_list_url}]
    )
    page = PageBuilder(header, writer.end())
    previous: datetime | None = None
    for item in lists:
        if previous is not None and item.since < previous:
            raise ValueError(f"archived lists must be oldest first: {item.loc}")
        previous = item.since
        lastmod = None if item.lastmod is None else w3c_datetime(item.lastmod)
        md = {"from": w3c_datetime(item.since), "until": w3c_datetime(item.until)}
        if not page.add(writer.entry(item.loc, lastmod, md)):
            raise DocumentTooLarge("a Change List Archive exceeds the sitemap limits")
    return page.close()


def split_lists(closed: Sequence[bool], keep: int | None) -> tuple[list[int], list[int]]:
    """Positions (oldest first) to archive and to keep in the index.

    `closed[i]` says whether list i is closed; only the oldest closed lists
    beyond the newest `keep` are archived, never the open one.
    """
    positions = list(range(len(closed)))
    if keep is None:
        return [], positions
    closed_positions = [position for position in positions if closed[position]]
    archived = closed_positions[: max(0, len(closed_positions) - keep)]
    return archived, [position for position in positions if position not in set(archived)]


def retain(
    run: RegenerationRun, pages: list[ChangeListPage]
) -> tuple[list[ChangeListPage], str | None]:
    """Write (or withdraw) the archive; the lists the index keeps and the archive's URL."""
    archived, kept = split_lists(
        [page.until is not None for page in pages], run.capabilities.changelist_keep
    )
    if not archived:
        remove_archive(run)
        return pages, None
    lists = [
        ArchivedList(
            loc=links.change_list_page_url(run.resource_set, pages[p].number),
            since=pages[p].since,
            until=pages[p].until,  # type: ignore[arg-type]  # closed lists have one
            lastmod=pages[p].generated_at,
        )
        for p in archived
    ]
    content = build_change_list_archive(lists, capability_list_url=run.capability_list_url)
    run.store_index(KIND, content, len(lists))
    return [pages[p] for p in kept], links.change_list_archive_url(run.resource_set)


def remove_archive(run: RegenerationRun) -> None:
    """No list is archived (any more): the archive document goes.

    Its links go with its row, holding the set: a tree rebuild that read the rows
    before would otherwise link it again.
    """
    resource_set = run.resource_set
    document = IndexDocument.objects.filter(resource_set=resource_set, kind=KIND).first()
    if document is None:
        return
    with run.lease.holding():
        publishing.withdraw(resource_set, document)
        document.delete()
    delete_document(document.storage_name)


def archive_written(resource_set: ResourceSet) -> bool:
    """Whether the set has a Change List Archive to list in its Capability List."""
    return (
        IndexDocument.objects.filter(resource_set=resource_set, kind=KIND)
        .exclude(storage_name="")
        .exists()
    )
