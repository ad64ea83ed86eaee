"""Regenerate a set's documents, rewriting only the pages that changed.

The change log says what changed since the last run (`through_change_id`):
each touched resource key marks the Resource List page whose key range holds
it; new keys land on the tail page. The open Change List is rewritten when
it has new changes, usually by appending them to its previous version
(`sitemaps.change_list_append`), and is closed when its rotation period ends
or it is full; a closed list is written once more, completely, and then never
again.

Which pages to write is planned over key ranges in `sitemaps.planning`; the
run holds the set through a heartbeat lease (`sitemaps.lease`) and builds
several pages at once in forked builders (`sitemaps.forking`).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import takewhile

from django.conf import settings
from django.db import connections, transaction
from django.db.models import Min
from django.utils import timezone

from journal.models import Run, RunKind
from journal.recording import record_run
from sitemaps.protocol.records import ChangeRecord, ResourceRecord
from sources.generators import BaseGenerator, get_generator
from sources.models import Change, ResourceSet
from sources.services import resource_set_lock

from . import change_list_append, change_list_archive, forking, lease, links, planning, publishing
from .change_list_append import BuiltChangeList, KeyTracker
from .dumps.build import build_dumps
from .dumps.job import DumpReport
from .models import (
    ChangeListPage,
    IndexDocument,
    RegenerationState,
    ResourceListPage,
    StoredDocument,
)
from .planning import KeyRange, Step
from .protocol.builders import (
    ChangeListPart,
    DocumentPage,
    ResourceListPart,
    build_change_list,
    build_change_list_index,
    build_resource_entries,
    build_resource_list,
    build_resource_list_index,
    join_parts,
    resource_list_frame,
)
from .ranges import key_range, split_row
from .signals import documents_changed
from .storage import StreamedDocument, delete_document, save_document

logger = logging.getLogger(__name__)

ONE_MICROSECOND = timedelta(microseconds=1)
#: A lone dirty page of at least this many entries is built in two halves, one per
#: core: a one-resource update then waits for half a page (forking costs ~20 ms).
HALVE_FROM_ENTRIES = 5000


@dataclass
class RegenerationReport:
    resource_pages_written: list[int] = field(default_factory=list)
    change_pages_written: list[int] = field(default_factory=list)
    indexes_written: list[str] = field(default_factory=list)
    through_change_id: int = 0
    seconds: float = 0.0
    bytes_written: int = 0
    dumps: DumpReport | None = None
    #: Newer changes the generator cannot show yet (a copy still indexing them).
    changes_not_visible: bool = False

    @property
    def pages_written(self) -> int:
        return (
            len(self.resource_pages_written)
            + len(self.change_pages_written)
            + len(self.indexes_written)
        )

    def to_journal(self, run: Run, *, full: bool) -> None:
        """What the journal keeps of the run: documents, dump packages, bytes."""
        dumps = self.dumps or DumpReport()
        run.count(
            pages=self.pages_written,
            packages=len(dumps.packages_written),
            bytes=self.bytes_written + dumps.bytes_written,
        )
        run.detail = {
            "full": full,
            "resource_list_pages": self.resource_pages_written,
            "change_lists": self.change_pages_written,
            "indexes": self.indexes_written,
            "through_change_id": self.through_change_id,
            "dumps": str(dumps) if self.dumps else "",
        }

    def __str__(self) -> str:
        packages = bool(self.dumps and self.dumps.packages_written)
        if not self.pages_written and not packages:
            if self.changes_not_visible:
                return "nothing to rewrite yet: newer changes wait for the generator's copy"
            return "nothing to rewrite: every document was up to date"
        parts = []
        if self.pages_written:
            parts.append(
                f"rewrote {len(self.resource_pages_written)} resource list page(s), "
                f"{len(self.change_pages_written)} change list page(s) and "
                f"{', '.join(self.indexes_written) or 'no index'}"
            )
        if self.dumps is not None and not self.dumps.problem:
            parts.append(str(self.dumps))
        return f"{'; '.join(parts)} ({self.seconds:.2f} s)"


def end_of_full(built: BuiltChangeList) -> tuple[datetime, int | None]:
    """Where a list that outgrew a document ends: after its last instant that fits whole,
    or inside that instant (after its last change id) when the list holds nothing else."""
    last = built.page.last_record
    assert last is not None and built.latest_read is not None, "a full list has entries"
    if built.latest_read > last.datetime:
        return last.datetime, None  # the next change is later: all fit
    if built.first_read is not None and built.first_read < last.datetime:
        return last.datetime - ONE_MICROSECOND, None
    return last.datetime, last.key


def start_after(until: datetime, until_key: int | None) -> datetime:
    """Where the list after one ending at (`until`, `until_key`) starts: inside that
    instant, after that change, or at the next microsecond."""
    return until if until_key is not None else until + ONE_MICROSECOND


def rotation_due(resource_set: ResourceSet, page: ChangeListPage, now: datetime) -> bool:
    """Whether the open list `page` closes at `now`: its period is over and it holds a
    change by then. An empty one stays open: closed, it would be a document without
    `<url>`, invalid against the sitemap schema, one for each period a quiet set spends.
    The beat asks the same, or it would queue a quiet set at every beat."""
    if now - page.since < resource_set.capabilities.changelist_rotation:
        return False
    window = change_list_append.changes_from_start(resource_set, page)
    return window.filter(datetime__lte=now).exists()


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


def regenerate(resource_set: ResourceSet, *, full: bool = False) -> RegenerationReport | None:
    """Bring the set's documents up to date; None if a live run holds the set."""
    started = time.monotonic()
    with transaction.atomic():
        # Under the set's lock: an ingest still in its transaction commits
        # first, so `at` never claims changes this run cannot see.
        now = resource_set_lock(resource_set=resource_set)
    held = lease.acquire(resource_set, now)
    if held is None:
        return None
    with record_run(kind=RunKind.REGENERATION, resource_set=resource_set) as journal:
        try:
            with lease.heartbeat(held) as beating:
                report = RegenerationRun(
                    resource_set, held, full=full, now=now, heartbeat=beating
                ).run()
        except BaseException as error:  # interrupted too (Ctrl-C, a time limit): let go at once
            held.release(last_error=f"{type(error).__name__}: {error}")
            raise
        report.to_journal(journal, full=full)
    report.seconds = time.monotonic() - started
    held.release(
        through_change_id=report.through_change_id,
        regenerated_at=now,
        duration=timedelta(seconds=report.seconds),
        pages_written=report.pages_written,
        last_error="",
    )
    logger.info("Regenerated %s: %s", resource_set, report)
    announce_documents(resource_set, report)
    return report


def announce_documents(resource_set: ResourceSet, report: RegenerationReport) -> None:
    """Send `documents_changed` after a run; log failing receivers."""
    responses = documents_changed.send_robust(
        sender=RegenerationRun, resource_set_id=resource_set.pk, report=report
    )
    for receiver, response in responses:
        if isinstance(response, Exception):
            logger.error("%s failed after regenerating %s: %r", receiver, resource_set, response)


@dataclass(frozen=True)
class StoredPage:
    """A page document saved to storage, as a forked builder reports it."""

    name: str
    etag: str
    entries: int
    size: int
    last_key: int | None


#: In a forked page builder: the run it was forked from.
_forked_run: RegenerationRun | None = None


def _adopt_run(run: RegenerationRun) -> None:
    """Pool initializer, in the child: remember the (inherited) run."""
    global _forked_run
    _forked_run = run


def _build_in_worker(public_name: str, keys: KeyRange, in_index: bool) -> StoredPage | None:
    """In a builder: build and store a page that keeps its range; None: the run redoes it."""
    assert _forked_run is not None, "not in a forked page builder"
    try:
        with StreamedDocument(_forked_run.directory, public_name) as document:
            result = _forked_run.build(keys, in_index, out=document.write)
            if not result.entries or result.has_more:
                return None  # it empties or splits: the run changes the ranges itself
            return _forked_run.store(document, result)
    finally:
        connections.close_all()


def _build_part_in_worker(keys: KeyRange) -> DocumentPage[ResourceRecord]:
    """In a builder: the entries of one part of a page's key range."""
    assert _forked_run is not None, "not in a forked page builder"
    try:
        return _forked_run.build_entries(keys)
    finally:
        connections.close_all()


class RegenerationRun:
    """One regeneration of one set; holds what the steps share."""

    def __init__(
        self,
        resource_set: ResourceSet,
        held: lease.Lease,
        *,
        full: bool,
        now: datetime,
        heartbeat: lease.Heartbeat | None = None,
    ) -> None:
        self.resource_set = resource_set
        self.lease = held
        self.heartbeat = heartbeat
        self.full = full
        self.now = now
        self.through_change_id = RegenerationState.objects.values_list(
            "through_change_id", flat=True
        ).get(pk=held.state_pk)
        self.generator = get_generator()
        self.capabilities = resource_set.capabilities
        # Before the watermark: a row moved since is either past it or in a version
        # recorded with the url_prefix it left (sitemaps.change_list_append).
        self.resolved_with = change_list_append.resolved_with(resource_set)
        self.watermark = change_watermark(resource_set, self.generator)
        self.unseen_changes = Change.objects.filter(
            resource_set=resource_set, id__gt=self.watermark
        )
        # Asked once: SQLite answers MIN(datetime) by walking the `change_window` index
        # over the whole change log (0.3 s at a million changes), and the database
        # generator never has any.
        self.changes_not_visible = self.unseen_changes.exists()
        self.at = self.snapshot_time()
        self.report = RegenerationReport(
            through_change_id=self.watermark, changes_not_visible=self.changes_not_visible
        )
        self.capability_list_url = links.capability_list_url(resource_set)
        #: Numbers of the lists whose start this run moved (`close_earlier`): written again.
        self.moved: set[int] = set()
        self.directory = resource_set.path
        self.max_bytes = settings.RESOURCESYNC_MAX_DOCUMENT_BYTES

    def run(self) -> RegenerationReport:
        if self.watermark < self.through_change_id:
            # The copy shows less than the documents already do (it lost an index and is
            # being filled again): pages built now would drop what they hold.
            self.report.through_change_id = self.through_change_id
            return self.report
        forking.map_large_buffers()  # pages are built here too, not only in forked builders
        # Change Lists first: they are what destinations poll to stay fresh,
        # and a Resource List page may take a second or two to rewrite.
        if self.capabilities.publish_change_list:
            self.change_lists()
        if self.capabilities.publish_resource_list:
            self.resource_lists()
        self.report.dumps = build_dumps(self)  # after the lists: packages take longer
        return self.report

    def snapshot_time(self) -> datetime:
        """`at` of pages written now: every change up to it is reflected.

        Changes the generator cannot show yet (past the watermark) pull it back.
        """
        if not self.changes_not_visible:
            return self.now
        unseen = self.unseen_changes.aggregate(first=Min("datetime"))["first"]
        if unseen is None or unseen > self.now:
            return self.now
        return unseen - ONE_MICROSECOND

    def new_changes(self):
        return Change.objects.filter(
            resource_set=self.resource_set,
            id__gt=self.through_change_id,
            id__lte=self.watermark,
        )

    def progress(self, *, remaining: int) -> None:
        """Show progress over Change Lists and Resource List pages written so far and left.

        It is also a heartbeat, and stops a run that lost its lease.
        """
        done = len(self.report.change_pages_written) + len(self.report.resource_pages_written)
        self.lease.beat(progress_done=done, progress_total=done + remaining)

    @contextmanager
    def forking(self) -> Iterator[None]:
        """No heartbeat (and so no connection in its thread) while children are forked."""
        if self.heartbeat is None:
            yield
            return
        with self.heartbeat.paused():
            yield

    # Resource Lists

    def resource_lists(self) -> None:
        pages, repaired = self.resource_pages()
        dirty = list(pages) if self.full else self.plan(pages, repaired)
        if not dirty and self.index_exists(IndexDocument.Kind.RESOURCE_LIST):
            return
        written = self.write_resource_pages(pages, dirty)
        multi = len(written) > 1
        stale = [p for p in written if p.in_index != multi]
        if stale:
            self.write_resource_pages(written, stale, multi=multi)
        self.write_resource_index(written, multi)

    def resource_pages(self) -> tuple[list[ResourceListPage], set[int]]:
        """The set's pages in key order, and the positions to rebuild whatever changed.

        Those are pages never written (a new first page, or a run killed before
        storing one) and pages whose key range had to be repaired.
        """
        pages = list(ResourceListPage.objects.filter(resource_set=self.resource_set))
        if not pages:
            pages = [
                ResourceListPage.objects.create(
                    resource_set=self.resource_set, number=1, after_key=0, through_key=None
                )
            ]
        unwritten = {position for position, page in enumerate(pages) if not page.storage_name}
        return pages, unwritten | self.repair_ranges(pages)

    def repair_ranges(self, pages: list[ResourceListPage]) -> set[int]:
        """Make the pages' key ranges tile every key again; the positions changed."""
        ranges = [key_range(page) for page in pages]
        fixed = planning.contiguous(ranges)
        repaired = planning.changed_positions(ranges, fixed)
        if not repaired:
            return repaired
        logger.warning("%s: repairing the key ranges of pages %s", self.resource_set, repaired)
        with transaction.atomic():
            for position in sorted(repaired):
                page = pages[position]
                page.after_key, page.through_key = fixed[position].after, fixed[position].through
                page.save(update_fields=["after_key", "through_key"])
        return repaired

    def plan(self, pages: list[ResourceListPage], repaired: set[int]) -> list[ResourceListPage]:
        """The pages the new changes make dirty; a full tail that only gains keys is closed."""
        keys = self.new_changes().exclude(resource_key=None).values_list("resource_key", flat=True)
        plan = planning.plan_rebuild(
            [key_range(page) for page in pages],
            keys.distinct().iterator(chunk_size=planning.KEYS_PER_FETCH),
            full_tail_last_key=self.full_tail_last_key(pages[-1]),
        )
        if plan.close_tail_at is not None:
            self.close_full_tail(pages, plan.close_tail_at)
        return [pages[position] for position in sorted(plan.dirty | repaired)]

    def full_tail_last_key(self, tail: ResourceListPage) -> int | None:
        """The tail's last key when it is stored and exactly full, else None."""
        full = tail.entries == self.capabilities.entries_per_document
        return tail.last_key if full and tail.storage_name else None

    def close_full_tail(self, pages: list[ResourceListPage], last_key: int) -> None:
        """Close the full tail at its last key (its document stays) and open a page after it."""
        self.split_page(pages, pages[-1], last_key)

    def split_page(
        self, pages: list[ResourceListPage], page: ResourceListPage, last_key: int
    ) -> ResourceListPage:
        """Close `page` at `last_key`; a new page after it takes the rest. One transaction."""
        return split_row(pages, page, last_key, resource_set=self.resource_set)

    def merge_page(self, pages: list[ResourceListPage], page: ResourceListPage) -> None:
        """An emptied page gives its key range to the next page and goes.

        One transaction holding the set, links included: a tree rebuild that read the
        rows before it would otherwise link the page again once it is gone.
        """
        position = pages.index(page)
        following = pages[position + 1]
        widened = planning.merge_into_next([key_range(p) for p in pages], position)[position]
        storage_name = page.storage_name
        with self.lease.holding():
            publishing.withdraw(self.resource_set, page)
            page.delete()
            following.after_key = widened.after
            following.save(update_fields=["after_key"])
        delete_document(storage_name)
        del pages[position]

    def write_resource_pages(
        self,
        pages: list[ResourceListPage],
        dirty: list[ResourceListPage],
        *,
        multi: bool | None = None,
    ) -> list[ResourceListPage]:
        """Rewrite the dirty pages in key order; a full page spills into a new one.

        With several to write, forked builders build and store the pages that
        keep their range while this loop records each in order; a page that
        spills over or empties is built again here, where ranges change.
        """
        built_in_index = multi if multi is not None else len(pages) > 1
        queue = list(dirty)
        lone = len(queue) == 1
        with self.prebuilt(queue, built_in_index) as prebuilt:
            while queue:
                page = queue.pop(0)
                stored = self.take_prebuilt(prebuilt, page)
                if stored is not None:
                    in_index = built_in_index
                else:
                    in_index = multi if multi is not None else len(pages) > 1
                    stored = self.build_here(pages, page, queue, in_index, halve=lone)
                    if stored is None:
                        continue
                self.store_page(page, stored, in_index)
                self.progress(remaining=len(queue))
        return pages

    def build_here(
        self,
        pages: list[ResourceListPage],
        page: ResourceListPage,
        queue: list[ResourceListPage],
        in_index: bool,
        *,
        halve: bool = False,
    ) -> StoredPage | None:
        """Build and store a page here, changing ranges as it asks; None if it merged away.

        A page that overflowed is closed at its last key and the new page after
        it is queued next.
        """
        with StreamedDocument(self.directory, page.public_name) as document:
            result = self.build_in_halves(page, in_index) if halve else None
            if result is None:
                result = self.build(key_range(page), in_index, out=document.write)
            else:
                document.write(result.content)
            last_key = result.last_record.key if result.last_record is not None else None
            step = planning.after_build(
                entries=result.entries,
                overflowed=result.has_more,
                last_key=last_key,
                is_last=page is pages[-1],
                count=len(pages),
            )
            if step is Step.MERGE:
                self.merge_page(pages, page)
                return None
            if step is Step.SPLIT and last_key is not None:
                queue.insert(0, self.split_page(pages, page, last_key))
            return self.store(document, result)

    @contextmanager
    def prebuilt(
        self, queue: list[ResourceListPage], in_index: bool
    ) -> Iterator[dict[int, Future[StoredPage | None]]]:
        """Pages being built by forked builders, by page number (none when we may not fork)."""
        workers = min(len(queue), os.cpu_count() or 1)
        # Celery's prefork workers are daemonic and may not fork. A forked
        # child gets its own Elasticsearch clients (sources.generators.elasticsearch).
        if workers < 2 or not forking.can_fork():
            yield {}
            return
        with forking.forked_pool(workers, _adopt_run, (self,)) as pool:
            with self.forking():  # the children are forked at the first submit
                futures = {
                    page.number: pool.submit(
                        _build_in_worker, page.public_name, key_range(page), in_index
                    )
                    for page in queue
                }
            yield futures

    def take_prebuilt(
        self, prebuilt: dict[int, Future[StoredPage | None]], page: ResourceListPage
    ) -> StoredPage | None:
        """The page as a builder stored it; None when it is to be built here."""
        future = prebuilt.pop(page.number, None)
        if future is None:
            return None
        try:
            return future.result()
        except Exception as error:  # its builder failed or died
            # The cause in the message: the journal and the command show only this line,
            # and "No space left on device" is what an operator must read there.
            raise RuntimeError(f"page {page.number} could not be built: {error}") from error

    def build(
        self, keys: KeyRange, in_index: bool, *, out: Callable[[bytes], object]
    ) -> DocumentPage[ResourceRecord]:
        """The page over `keys`, streamed to `out` as it is rendered (its content stays empty)."""
        records = self.generator.iter_resource_batches(
            self.resource_set, after=keys.after, through=keys.through
        )
        return build_resource_list(
            records,
            at=self.at,
            capability_list_url=self.capability_list_url,
            index_url=self.resource_list_index_url(in_index),
            max_entries=self.capabilities.entries_per_document,
            max_bytes=self.max_bytes,
            out=out,
        )

    def resource_list_index_url(self, in_index: bool) -> str | None:
        return links.resource_list_url(self.resource_set) if in_index else None

    def build_entries(self, keys: KeyRange) -> DocumentPage[ResourceRecord]:
        records = self.generator.iter_resource_batches(
            self.resource_set, after=keys.after, through=keys.through
        )
        return build_resource_entries(
            records, max_entries=self.capabilities.entries_per_document, max_bytes=self.max_bytes
        )

    def build_in_halves(
        self, page: ResourceListPage, in_index: bool
    ) -> DocumentPage[ResourceRecord] | None:
        """The page built by two forked builders, half its key range each, joined here.

        None when it is not worth it or not possible (a small page, the open
        tail, one CPU, no forking) or the halves break a limit: build it whole.
        """
        keys = key_range(page)
        if (
            page.entries < HALVE_FROM_ENTRIES
            or keys.through is None
            or (os.cpu_count() or 1) < 2
            or not forking.can_fork()
        ):
            return None
        middle = keys.after + (keys.through - keys.after) // 2
        halves = [KeyRange(keys.after, middle), KeyRange(middle, keys.through)]
        with forking.forked_pool(2, _adopt_run, (self,)) as pool:
            with self.forking():  # the children are forked at the first submit
                futures = [pool.submit(_build_part_in_worker, half) for half in halves]
            parts = [future.result() for future in futures]
        frame = resource_list_frame(
            at=self.at,
            capability_list_url=self.capability_list_url,
            index_url=self.resource_list_index_url(in_index),
        )
        return join_parts(
            frame,
            parts,
            max_entries=self.capabilities.entries_per_document,
            max_bytes=self.max_bytes,
        )

    def store(self, document: StreamedDocument, result: DocumentPage[ResourceRecord]) -> StoredPage:
        name, etag = document.save()
        last_key = result.last_record.key if result.last_record is not None else None
        return StoredPage(name, etag, result.entries, result.size, last_key)

    def store_page(self, page: ResourceListPage, stored: StoredPage, in_index: bool) -> None:
        """Point the page at its saved document."""
        page.entries, page.size, page.in_index = stored.entries, stored.size, in_index
        page.last_key = stored.last_key
        page.at, page.completed, page.generated_at = self.at, timezone.now(), timezone.now()
        self.point_at(page, stored.name, stored.etag)
        self.report.resource_pages_written.append(page.number)

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
        if rotation_due(self.resource_set, pages[-1], self.now):
            self.rotate(pages, changed)
            changed = True
        for position, page in enumerate(pages):  # it grows when a full open list closes
            if not self.change_page_due(page, changed):
                continue
            self.write_change_page(page, pages)
            later = pages[position + 1 :]
            self.progress(remaining=sum(self.change_page_due(p, changed) for p in later))
        if changed or self.report.change_pages_written:
            kept, archives_url = change_list_archive.retain(self, pages)
            self.write_change_index(kept, archives_url=archives_url)

    def rotate(self, pages: list[ChangeListPage], changed: bool) -> None:
        """Close the open list by time. With new changes it is written first, so a list that
        outgrew a document splits at the limits: only an open one splits, and a closed one
        written over-full would keep its first entries and lose the rest."""
        if changed:
            self.write_change_page(pages[-1], pages)
        # Unless it split on changes committed since the run began: the list they opened
        # starts after the run's time, and closing it there would end it before its start.
        if pages[-1].since <= self.now:
            pages.append(self.close(pages[-1], self.now))

    def change_page_due(self, page: ChangeListPage, changed: bool) -> bool:
        """A final list only in a full run; the open one only when it has new changes or
        its start moved."""
        if page.final and not self.full:
            return False
        return page.until is not None or changed or page.number in self.moved

    def first_change_list(self) -> ChangeListPage:
        """Open the first list under the set's lock and record its start, which
        ingestion then enforces: no accepted change can fall before it."""
        with transaction.atomic():
            resource_set_lock(resource_set=self.resource_set)
            earliest = Change.objects.filter(resource_set=self.resource_set).aggregate(
                first=Min("datetime")
            )["first"]
            since = min(filter(None, [earliest, self.resource_set.created_at]))
            ResourceSet.objects.filter(pk=self.resource_set.pk).update(accepts_changes_since=since)
            return ChangeListPage.objects.create(
                resource_set=self.resource_set, number=1, since=since
            )

    def close(
        self, page: ChangeListPage, until: datetime, until_key: int | None = None
    ) -> ChangeListPage:
        """Close `page` at `until` under the set's lock and open the next list.

        With `until_key` the list ends inside that instant, after that change, and
        the next one starts there: at the same instant, after the same change.
        """
        with transaction.atomic():
            resource_set_lock(resource_set=self.resource_set)
            page.until, page.until_key = until, until_key
            page.save(update_fields=["until", "until_key"])
            since = start_after(until, until_key)
            ResourceSet.objects.filter(pk=self.resource_set.pk).update(accepts_changes_since=since)
            return ChangeListPage.objects.create(
                resource_set=self.resource_set,
                number=page.number + 1,
                since=since,
                since_key=until_key,
            )

    def close_full(self, page: ChangeListPage, built: BuiltChangeList) -> ChangeListPage:
        """Close a full open list where it fills up (`end_of_full`)."""
        return self.close(page, *end_of_full(built))

    def close_earlier(
        self, page: ChangeListPage, successor: ChangeListPage, built: BuiltChangeList
    ) -> None:
        """End a closed list that outgrew a document where it fills up; its successor,
        which lists nothing yet, starts there.

        A list closed at a rotation holds what was committed before the close took the
        set's lock: a request in flight, dated before the close, commits its changes
        into the closed window after the open list was last written.
        """
        until, until_key = end_of_full(built)
        with transaction.atomic():
            resource_set_lock(resource_set=self.resource_set)
            page.until, page.until_key = until, until_key
            page.save(update_fields=["until", "until_key"])
            successor.since = start_after(until, until_key)
            successor.since_key = until_key
            successor.save(update_fields=["since", "since_key"])
        self.moved.add(successor.number)

    def complete_through(self, until: datetime) -> bool:
        """Whether every change up to `until` is visible to the generator."""
        return not Change.objects.filter(
            resource_set=self.resource_set, datetime__lte=until, id__gt=self.watermark
        ).exists()

    def write_change_page(self, page: ChangeListPage, pages: list[ChangeListPage]) -> None:
        """Write `page`, and the lists it opens as it fills up, one after the other (a
        backlog of hundreds of full lists is a loop, not as many nested calls)."""
        writing: ChangeListPage | None = page
        while writing is not None:
            writing = self.write_one_change_page(writing, pages)

    def write_one_change_page(
        self, page: ChangeListPage, pages: list[ChangeListPage]
    ) -> ChangeListPage | None:
        """Write one list; the list to write next, if it had to end earlier."""
        # Only a list under an index links to it (closing a list opens the next).
        index_url = links.change_list_url(self.resource_set) if len(pages) > 1 else None
        built = None if self.full else change_list_append.append(self, page, index_url)
        if built is None:
            built = self.build_change_page(page, index_url)
        result = built.page
        if not (result.has_more and result.last_record is not None):
            self.store_change_page(page, built)
            return None
        if page.until is None:
            # Full: close it and write it, then the list it opened.
            pages.append(self.close_full(page, built))
            self.write_change_page(page, pages)
            return pages[-1]
        successor = pages[pages.index(page) + 1]
        if successor.generated_at is None or (successor.entries == 0 and not successor.final):
            self.close_earlier(page, successor, built)
            return page  # its successor comes later in the run
        # Never cut a closed list: what it cannot pass on would be in no list.
        logger.warning(
            "%s outgrew its limit after its successor was published: written whole",
            page.public_name,
        )
        self.store_change_page(page, self.build_change_page(page, index_url, whole=True))
        return None

    def build_change_page(
        self, page: ChangeListPage, index_url: str | None, *, whole: bool = False
    ) -> BuiltChangeList:
        """The list rendered from every change in its window (past the limits if `whole`)."""
        records = KeyTracker(self.page_changes(page))
        result = build_change_list(
            records,
            since=page.since,
            until=page.until,
            capability_list_url=self.capability_list_url,
            index_url=index_url,
            max_entries=sys.maxsize if whole else self.capabilities.entries_per_document,
            max_bytes=sys.maxsize if whole else self.max_bytes,
        )
        return BuiltChangeList.of(result, records, page)

    def visible_changes(
        self,
        since: datetime,
        until: datetime | None,
        after: tuple[datetime, int] | None = None,
    ) -> Iterator[ChangeRecord]:
        """The changes in [since, until] this run may publish: those the generator showed,
        with every change before them, when the run began (the watermark), none past the
        first change it could not show then (`at`).

        Destinations resume from the newest datetime they applied. A copy (Elasticsearch)
        can take a later request's changes, or a request's later-dated ones, first: listed
        before the others, they would put those behind that datetime.
        """
        if self.changes_not_visible:
            until = self.at if until is None else min(until, self.at)
        return self.generator.iter_changes(
            self.resource_set, since=since, until=until, after=after, through=self.watermark
        )

    def page_changes(self, page: ChangeListPage) -> Iterator[ChangeRecord]:
        """The changes in the list's window, in (datetime, id) order; at an instant split
        between two lists, only its own (`since_key`, `until_key`)."""
        after = None if page.since_key is None else (page.since, page.since_key)
        records = self.visible_changes(page.since, page.until, after)
        if page.until is None or page.until_key is None:
            return records
        end = (page.until, page.until_key)
        return takewhile(lambda record: (record.datetime, record.key) <= end, records)

    def store_change_page(self, page: ChangeListPage, built: BuiltChangeList) -> None:
        """Save the version and point the row (with its append base) at it."""
        result = built.page
        final = page.until is not None and self.complete_through(page.until)
        name, etag = save_document(self.directory, page.public_name, result.content)
        page.final = final
        page.entries, page.size, page.generated_at = (
            result.entries,
            len(result.content),
            timezone.now(),
        )
        page.last_key, page.last_datetime = built.last_key, built.last_datetime
        # Every change it lists is within the watermark (`visible_changes`), so none is a
        # mirror's copy from before a url_prefix change: the next version may grow from it.
        page.max_key, page.resolved_with = built.max_key, self.resolved_with
        self.point_at(page, name, etag)
        self.report.change_pages_written.append(page.number)

    def write_change_index(
        self, pages: list[ChangeListPage], archives_url: str | None = None
    ) -> None:
        """`changelist.xml`: the only Change List itself, or an index once there are several
        (or once older lists moved to an archive, which only an index can link to).

        The same rule as `resourcelist.xml`, so a client that reads no index
        (resync 2.0.1) syncs a set with one list through either URL.
        """
        if len(pages) == 1 and archives_url is None:
            content = self.read_page(pages[0])
            self.store_index(IndexDocument.Kind.CHANGE_LIST, content, pages[0].entries)
            return
        parts = [
            ChangeListPart(
                loc=links.change_list_page_url(self.resource_set, page.number),
                since=page.since,
                until=page.until,
            )
            for page in pages
        ]
        content = build_change_list_index(
            parts,
            since=pages[0].since,
            capability_list_url=self.capability_list_url,
            archives_url=archives_url,
        )
        self.store_index(IndexDocument.Kind.CHANGE_LIST, content, len(pages))

    def point_at(self, document: StoredDocument, name: str, etag: str) -> None:
        """Save the row on its new version, publish it, then drop the old version.

        In that order a reader (of the row or of the published tree) never
        finds its version deleted under it.
        """
        previous = document.storage_name
        document.storage_name, document.etag = name, etag
        self.report.bytes_written += document.size
        with publishing.switching(self.lease, self.resource_set, document):
            document.save()
            publishing.publish(self.resource_set, document)
        if previous and previous != name:
            delete_document(previous)

    # Indexes

    def index_exists(self, kind: str) -> bool:
        return IndexDocument.objects.filter(resource_set=self.resource_set, kind=kind).exists()

    def read_page(self, page: StoredDocument) -> bytes:
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
