"""Regenerate a set's documents, rewriting only the pages that changed.

The change log says what changed since the last run (`through_change_id`):
each touched resource key marks the Resource List page whose key range holds
it; new keys land on the tail page. The open Change List is rewritten when
it has new changes and is closed when its rotation period ends or it is
full; a closed list is written once more, completely, and then never again.
"""

from __future__ import annotations

import bisect
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Min, Q
from django.utils import timezone

from sources.generators import BaseGenerator, get_generator
from sources.models import Change, ResourceSet
from sources.services import resource_set_lock

from . import links, publishing
from .builders import (
    ChangeListPart,
    ResourceListPart,
    build_change_list,
    build_change_list_index,
    build_resource_list,
    build_resource_list_index,
)
from .models import (
    ChangeListPage,
    IndexDocument,
    RegenerationState,
    ResourceListPage,
    StoredDocument,
)
from .storage import delete_document, save_document

logger = logging.getLogger(__name__)

#: A run that has not finished after this long is presumed dead.
LEASE = timedelta(minutes=30)
ONE_MICROSECOND = timedelta(microseconds=1)


@dataclass
class RegenerationReport:
    resource_pages_written: list[int] = field(default_factory=list)
    change_pages_written: list[int] = field(default_factory=list)
    indexes_written: list[str] = field(default_factory=list)
    through_change_id: int = 0
    seconds: float = 0.0

    @property
    def pages_written(self) -> int:
        return (
            len(self.resource_pages_written)
            + len(self.change_pages_written)
            + len(self.indexes_written)
        )

    def __str__(self) -> str:
        return (
            f"rewrote {len(self.resource_pages_written)} resource list page(s), "
            f"{len(self.change_pages_written)} change list page(s) and "
            f"{', '.join(self.indexes_written) or 'no index'} in {self.seconds:.2f}s"
        )


def _acquire(resource_set: ResourceSet, now: datetime) -> RegenerationState | None:
    state, _ = RegenerationState.objects.get_or_create(resource_set=resource_set)
    taken = RegenerationState.objects.filter(
        Q(running_since__isnull=True) | Q(running_since__lt=now - LEASE), pk=state.pk
    ).update(running_since=now, progress_done=0, progress_total=0)
    if not taken:
        return None
    state.refresh_from_db()
    return state


def change_watermark(resource_set: ResourceSet, generator: BaseGenerator) -> int:
    """The highest change id the generator can already show, with all before it."""
    return generator.visible_through(resource_set)


def pending_changes(resource_set: ResourceSet) -> int:
    """Changes accepted but not yet reflected in the documents."""
    through = (
        RegenerationState.objects.filter(resource_set=resource_set)
        .values_list("through_change_id", flat=True)
        .first()
        or 0
    )
    return Change.objects.filter(resource_set=resource_set, id__gt=through).count()


def dirty_resource_pages(resource_set: ResourceSet) -> list[int]:
    """Numbers of the Resource List pages pending changes will rewrite."""
    pages = list(ResourceListPage.objects.filter(resource_set=resource_set))
    if not pages:
        return []
    state, _ = RegenerationState.objects.get_or_create(resource_set=resource_set)
    newest = Change.objects.filter(resource_set=resource_set).aggregate(n=Max("id"))["n"] or 0
    changes = Change.objects.filter(
        resource_set=resource_set, id__gt=state.through_change_id, id__lte=newest
    )
    return sorted(pages[position].number for position in touched_pages(pages, changes))


def touched_pages(pages: list[ResourceListPage], changes) -> set[int]:
    """Positions of the pages whose key ranges hold a key these changes touched."""
    starts = [page.after_key for page in pages]
    dirty: set[int] = set()
    keys = changes.exclude(resource_key=None).values_list("resource_key", flat=True)
    for key in keys.distinct().iterator(chunk_size=10_000):
        # The page holding `key` has the greatest after_key below it.
        dirty.add(max(bisect.bisect_left(starts, key) - 1, 0))
    return dirty


def regenerate(resource_set: ResourceSet, *, full: bool = False) -> RegenerationReport | None:
    """Bring the set's documents up to date; None if another run holds the set."""
    started = time.monotonic()
    with transaction.atomic():
        # Under the set's lock: an ingest still in its transaction commits
        # first, so `at` never claims changes this run cannot see.
        now = resource_set_lock(resource_set=resource_set)
    state = _acquire(resource_set, now)
    if state is None:
        return None
    try:
        report = _Run(resource_set, state, full=full, now=now).run()
    except Exception as error:
        RegenerationState.objects.filter(pk=state.pk).update(
            running_since=None, last_error=f"{type(error).__name__}: {error}"
        )
        raise
    report.seconds = time.monotonic() - started
    RegenerationState.objects.filter(pk=state.pk).update(
        running_since=None,
        through_change_id=report.through_change_id,
        regenerated_at=now,
        duration=timedelta(seconds=report.seconds),
        pages_written=report.pages_written,
        last_error="",
    )
    logger.info("Regenerated %s: %s", resource_set, report)
    return report


class _Run:
    """One regeneration of one set; holds what the steps share."""

    def __init__(
        self, resource_set: ResourceSet, state: RegenerationState, *, full: bool, now: datetime
    ) -> None:
        self.resource_set = resource_set
        self.state = state
        self.full = full
        self.now = now
        self.generator = get_generator()
        self.capabilities = resource_set.capabilities
        self.watermark = change_watermark(resource_set, self.generator)
        self.at = self.snapshot_time()
        self.report = RegenerationReport(through_change_id=self.watermark)
        self.capability_list_url = links.capability_list_url(resource_set)
        self.directory = resource_set.path
        self.max_bytes = settings.RESOURCESYNC_MAX_DOCUMENT_BYTES

    def run(self) -> RegenerationReport:
        # Change Lists first: they are what destinations poll to stay fresh,
        # and a Resource List page may take a second or two to rewrite.
        if self.capabilities.publish_change_list:
            self.change_lists()
        if self.capabilities.publish_resource_list:
            self.resource_lists()
        return self.report

    def snapshot_time(self) -> datetime:
        """`at` of pages written now: every change up to it is reflected.

        Changes the generator cannot show yet (past the watermark) pull it back.
        """
        unseen = Change.objects.filter(
            resource_set=self.resource_set, id__gt=self.watermark
        ).aggregate(first=Min("datetime"))["first"]
        if unseen is None or unseen > self.now:
            return self.now
        return unseen - ONE_MICROSECOND

    def new_changes(self):
        return Change.objects.filter(
            resource_set=self.resource_set,
            id__gt=self.state.through_change_id,
            id__lte=self.watermark,
        )

    def progress(self, done: int, total: int) -> None:
        RegenerationState.objects.filter(pk=self.state.pk).update(
            progress_done=done, progress_total=total
        )

    # Resource Lists

    def resource_lists(self) -> None:
        pages = list(ResourceListPage.objects.filter(resource_set=self.resource_set))
        if not pages:
            pages = [
                ResourceListPage.objects.create(
                    resource_set=self.resource_set, number=1, after_key=0, through_key=None
                )
            ]
            dirty = set(range(len(pages)))
        elif self.full:
            dirty = set(range(len(pages)))
        else:
            dirty = touched_pages(pages, self.new_changes())
        if not dirty and self.index_exists(IndexDocument.Kind.RESOURCE_LIST):
            return
        written = self.write_resource_pages(pages, sorted(dirty))
        multi = len(written) > 1
        stale = [p for p in written if p.in_index != multi]
        if stale:
            self.write_resource_pages(written, [written.index(p) for p in stale], multi=multi)
        self.write_resource_index(written, multi)

    def write_resource_pages(
        self, pages: list[ResourceListPage], dirty: list[int], *, multi: bool | None = None
    ) -> list[ResourceListPage]:
        """Rewrite pages at the given positions; full pages spill into new ones.

        Building a page is CPU-bound Python, so with several to write, forked
        workers (one per CPU) build and store them while this loop records
        each in order; a page that spills over or empties is built again here.
        Not inside a transaction: the workers' connections could not see its rows.
        """
        import multiprocessing
        import os
        from multiprocessing.connection import Connection

        from django.db import connection, connections

        def build(page: ResourceListPage, in_index: bool):
            records = self.generator.iter_resources(
                self.resource_set, after=page.after_key, through=page.through_key
            )
            return build_resource_list(
                records,
                at=self.at,
                capability_list_url=self.capability_list_url,
                index_url=links.resource_list_url(self.resource_set) if in_index else None,
                max_entries=self.capabilities.entries_per_document,
                max_bytes=self.max_bytes,
            )

        def save(page: ResourceListPage, result) -> tuple[str, str, int, int]:
            name, etag = save_document(self.directory, page.public_name, result.content)
            return name, etag, result.entries, len(result.content)

        def work(positions: list[int], in_index: bool, channel) -> None:
            """In a worker: send (number, stored page or None to build it again) per page."""
            try:
                for page in (pages[position] for position in positions):
                    result = build(page, in_index)
                    keeps_range = result.entries and not result.has_more
                    channel.send((page.number, save(page, result) if keeps_range else None))
            except BaseException as error:
                try:
                    channel.send((None, error))
                except Exception:  # one that pickle cannot carry
                    channel.send((None, RuntimeError(repr(error))))
            finally:
                connections.close_all()

        queue = list(dirty)
        built_in_index = multi if multi is not None else len(pages) > 1
        built_elsewhere: dict[int, Connection] = {}  # page number -> its worker's pipe
        workers = []
        count = min(len(queue), os.cpu_count() or 1)
        # Celery's prefork workers are daemonic and may not fork. A forked
        # child gets its own Elasticsearch clients (sources.generators.elasticsearch).
        can_fork = not multiprocessing.current_process().daemon
        if count > 1 and can_fork and not connection.in_atomic_block:
            context = multiprocessing.get_context("fork")
            connections.close_all()  # each worker opens its own
            for share in (queue[start::count] for start in range(count)):
                reader, writer = context.Pipe(duplex=False)
                workers.append(context.Process(target=work, args=(share, built_in_index, writer)))
                workers[-1].daemon = True
                workers[-1].start()
                writer.close()  # a worker that dies now makes recv() raise EOFError
                built_elsewhere.update((pages[position].number, reader) for position in share)
        done = 0
        while queue:
            position = queue.pop(0)
            page = pages[position]
            is_tail = position == len(pages) - 1
            in_index = multi if multi is not None else len(pages) > 1
            stored = None
            if page.number in built_elsewhere:
                try:
                    number, stored = built_elsewhere.pop(page.number).recv()
                except EOFError:  # its worker died
                    number, stored = None, None
                if number != page.number:
                    raise RuntimeError(f"page {page.number} could not be built") from stored
                in_index = built_in_index
            if stored is None:
                result = build(page, in_index)
                if result.has_more and result.last_record is not None:
                    # Close this page at its last key; the rest goes to a new page after it.
                    split = ResourceListPage.objects.create(
                        resource_set=self.resource_set,
                        number=self.next_number(pages),
                        after_key=result.last_record.key,
                        through_key=page.through_key,
                    )
                    page.through_key = result.last_record.key
                    pages.insert(position + 1, split)
                    queue = [p + 1 if p > position else p for p in queue]
                    queue.insert(0, position + 1)
                elif result.entries == 0 and not is_tail and len(pages) > 1:
                    # An emptied page gives its key range to the next page and goes.
                    following = pages[position + 1]
                    publishing.withdraw(self.resource_set, page)
                    delete_document(page.storage_name)
                    page.delete()
                    following.after_key = page.after_key
                    following.save(update_fields=["after_key"])
                    del pages[position]
                    queue = [p - 1 if p > position else p for p in queue]
                    continue
                stored = save(page, result)
            self.store_page(page, stored, in_index)
            self.report.resource_pages_written.append(page.number)
            done += 1
            self.progress(done, done + len(queue))
        for worker in workers:
            worker.join()
        return pages

    def next_number(self, pages: list[ResourceListPage]) -> int:
        return max(page.number for page in pages) + 1

    def store_page(
        self, page: ResourceListPage, stored: tuple[str, str, int, int], in_index: bool
    ) -> None:
        """Point the page at its saved document: (storage name, etag, entries, size)."""
        name, etag, entries, size = stored
        page.entries, page.size, page.in_index = entries, size, in_index
        page.at, page.completed, page.generated_at = self.at, timezone.now(), timezone.now()
        self.point_at(page, name, etag)

    def write_resource_index(self, pages: list[ResourceListPage], multi: bool) -> None:
        if multi:
            parts = [
                ResourceListPart(
                    loc=links.resource_list_page_url(self.resource_set, page.number),
                    at=page.at or self.now,
                    completed=page.completed,
                )
                for page in pages
            ]
            content = build_resource_list_index(
                parts,
                at=self.at,
                completed=timezone.now(),
                capability_list_url=self.capability_list_url,
            )
        else:
            content = self.read_page(pages[0])
        self.store_index(
            IndexDocument.Kind.RESOURCE_LIST, content, len(pages) if multi else pages[0].entries
        )

    # Change Lists

    def change_lists(self) -> None:
        pages = list(ChangeListPage.objects.filter(resource_set=self.resource_set))
        if not pages:
            pages = [self.first_change_list()]
        changed = (
            self.full
            or self.new_changes().exists()
            or not self.index_exists(IndexDocument.Kind.CHANGE_LIST)
        )
        open_page = pages[-1]
        if self.now - open_page.since >= self.capabilities.changelist_rotation:
            pages.append(self.close(open_page, self.now))
            changed = True
        for page in pages:
            if page.final and not self.full:
                continue
            if page.until is None and not changed:
                continue
            self.write_change_page(page, pages)
        if changed or self.report.change_pages_written:
            self.write_change_index(pages)

    def first_change_list(self) -> ChangeListPage:
        earliest = Change.objects.filter(resource_set=self.resource_set).aggregate(
            first=Min("datetime")
        )["first"]
        since = min(filter(None, [earliest, self.resource_set.created_at]))
        return ChangeListPage.objects.create(resource_set=self.resource_set, number=1, since=since)

    def close(self, page: ChangeListPage, until: datetime) -> ChangeListPage:
        """Close `page` at `until` under the set's lock and open the next list."""
        with transaction.atomic():
            resource_set_lock(resource_set=self.resource_set)
            page.until = until
            page.save(update_fields=["until"])
            since = until + ONE_MICROSECOND
            ResourceSet.objects.filter(pk=self.resource_set.pk).update(accepts_changes_since=since)
            return ChangeListPage.objects.create(
                resource_set=self.resource_set, number=page.number + 1, since=since
            )

    def complete_through(self, until: datetime) -> bool:
        """Whether every change up to `until` is visible to the generator."""
        return not Change.objects.filter(
            resource_set=self.resource_set, datetime__lte=until, id__gt=self.watermark
        ).exists()

    def write_change_page(self, page: ChangeListPage, pages: list[ChangeListPage]) -> None:
        records = self.generator.iter_changes(self.resource_set, since=page.since, until=page.until)
        result = build_change_list(
            records,
            since=page.since,
            until=page.until,
            capability_list_url=self.capability_list_url,
            index_url=links.change_list_url(self.resource_set),
            max_entries=self.capabilities.entries_per_document,
            max_bytes=self.max_bytes,
        )
        if result.has_more and result.last_record is not None and page.until is None:
            # Full: close at the last datetime that fits whole, then write the rest anew.
            until = result.last_record.datetime
            if self.generator.count_changes(self.resource_set, since=page.since, until=until) > (
                result.entries
            ):
                until -= ONE_MICROSECOND
            pages.append(self.close(page, until))
            self.write_change_page(page, pages)
            self.write_change_page(pages[-1], pages)
            return
        final = page.until is not None and self.complete_through(page.until)
        name, etag = save_document(self.directory, page.public_name, result.content)
        page.final = final
        page.entries, page.size, page.generated_at = (
            result.entries,
            len(result.content),
            timezone.now(),
        )
        self.point_at(page, name, etag)
        self.report.change_pages_written.append(page.number)

    def write_change_index(self, pages: list[ChangeListPage]) -> None:
        parts = [
            ChangeListPart(
                loc=links.change_list_page_url(self.resource_set, page.number),
                since=page.since,
                until=page.until,
            )
            for page in pages
        ]
        content = build_change_list_index(
            parts, since=pages[0].since, capability_list_url=self.capability_list_url
        )
        self.store_index(IndexDocument.Kind.CHANGE_LIST, content, len(pages))

    def point_at(self, document: StoredDocument, name: str, etag: str) -> None:
        """Save the row on its new version, publish it, then drop the old version.

        In that order a reader (of the row or of the published tree) never
        finds its version deleted under it.
        """
        previous = document.storage_name
        document.storage_name, document.etag = name, etag
        document.save()
        publishing.publish(self.resource_set, document)
        if previous and previous != name:
            delete_document(previous)

    # Indexes

    def index_exists(self, kind: str) -> bool:
        return IndexDocument.objects.filter(resource_set=self.resource_set, kind=kind).exists()

    def read_page(self, page: ResourceListPage) -> bytes:
        from .storage import document_storage

        with document_storage().open(page.storage_name, "rb") as handle:
            return handle.read()

    def store_index(self, kind: str, content: bytes, entries: int) -> None:
        document, _ = IndexDocument.objects.get_or_create(
            resource_set=self.resource_set, kind=kind, defaults={"number": 0}
        )
        name, etag = save_document(self.directory, document.public_name, content)
        document.entries, document.size, document.generated_at = (
            entries,
            len(content),
            timezone.now(),
        )
        self.point_at(document, name, etag)
        self.report.indexes_written.append(f"{kind}.xml")
