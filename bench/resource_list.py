"""Time a full Resource List of N resources, from the database and from Elasticsearch.

    .venv/bin/python bench/resource_list.py [--size 1000000] [--repeat 3]
        [--elasticsearch http://127.0.0.1:9250 [--index-prefix bench-rl]]
        [--change-lists] [--output FILE] [--keep]

A fresh database (SQLite in the work folder, or with `--postgres URL` a new
PostgreSQL database on that server) and document store under bench/work/.
N resources, each with the `created` change ingestion would have logged, are
written with the ingestion service's batch writer. Then, per generator:

- initial: the first regeneration, which finds the page boundaries as it goes;
- full: `regenerate(full=True)` over the existing pages, `--repeat` times;
- update: one `updated` event through `ingest_events`, then `regenerate()`,
  which must rewrite exactly the page holding it and the index;
- delete, then create: the same for one `deleted` event (a page in the first
  half) and one `created` event (a new key, so the tail page: when N is a
  multiple of 50,000 the tail is full, so it is closed as it is and the new
  entry starts a page, the only one written).

Every run is checked before a figure is kept: the index lists every page, the
pages hold each resource exactly once and in key order (updated ones with
their new hash, deleted ones gone), sizes, ETags and gzip twins match. Any
failed check raises, so the script exits non-zero instead of reporting
numbers from a broken run. Loading and checking run in forked processes, so
their memory never counts in the figures; memory is the peak proportional set
size of this process and its page workers together (shared pages once),
sampled every 0.1 s, beside the largest resident size of any one of them.

With `--elasticsearch` the data is mirrored by `sources.indexing` into indices
named after `--index-prefix` (dropped first, and after the run unless --keep),
and the phases run again from the Elasticsearch generator. The set publishes
only its Resource List, which is what the targets are about; `--change-lists`
adds its Change Lists to every regeneration.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import hashlib
import io
import json
import math
import multiprocessing
import os
import resource
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_database_argument, database_name, database_url

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "bench" / "work"
RESULTS = REPO / "bench" / "results"

ENTRIES_PER_DOCUMENT = 50_000
LOAD_CHUNK = 10_000
COMMIT_EVERY = 100_000
SAMPLE_SECONDS = 0.1
DATABASE = "sources.generators.database.DatabaseGenerator"
ELASTICSEARCH = "sources.generators.elasticsearch.ElasticsearchGenerator"
SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
RS = "{http://www.openarchives.org/rs/terms/}"

# Data shaped like a harvested set: distinct hashes, sizes and times (a quarter
# with microseconds), a few MIME types, a describedby link on every resource,
# and one URI in a thousand with a query string that needs escaping.
FIRST_LASTMOD = datetime(2020, 1, 1, tzinfo=UTC)
MIMES = ("text/plain", "application/pdf", "image/jpeg", "text/html; charset=utf-8")


class BenchFailure(AssertionError):
    """A run whose documents are wrong: no figure from it may be reported."""


def check(condition: object, message: str) -> None:
    if not condition:
        raise BenchFailure(message)


# Data


def resource_uri(n: int) -> str:
    uri = f"http://data.example.org/bench/r/{n:07d}"
    return uri + "?view=full&lang=en" if n % 1000 == 999 else uri


def resource_md5(n: int, version: int) -> str:
    return hashlib.md5(f"{n} v{version}".encode(), usedforsecurity=False).hexdigest()


def make_event(n: int, change: str = "created", version: int = 1):
    from sources.events import Event, LinkData

    uri = resource_uri(n)
    if change == "deleted":
        return Event(change=change, location_type="url", location_value=uri, uri=uri)
    micro = (n * 7919) % 1_000_000 if n % 4 == 0 else 0
    lastmod = FIRST_LASTMOD + timedelta(seconds=n * 37 + version * 86_400, microseconds=micro)
    link = LinkData(
        rel="describedby", href_type="url", href_value=uri + ".xml", mime="application/xml",
        uri=uri + ".xml",
    )  # fmt: skip
    return Event(
        change=change,
        location_type="url",
        location_value=uri,
        uri=uri,
        length=1_000 + (n * 7_919) % 1_000_000,
        md5=resource_md5(n, version),
        mime=MIMES[n % len(MIMES)],
        lastmod=lastmod,
        links=(link,),
    )


@dataclass
class Expected:
    """What the documents must hold: resources 0 to count - 1 but the deleted ones.

    Resource n has key n + 1; `versions` holds those updated since the load.
    """

    count: int
    versions: dict[int, int] = field(default_factory=dict)
    deleted: set[int] = field(default_factory=set)

    @property
    def present(self) -> int:
        return self.count - len(self.deleted)

    def numbers(self) -> Iterator[int]:
        return (n for n in range(self.count) if n not in self.deleted)


def make_set(change_lists: bool):
    from sources.models import CapabilitySettings, DataProvider, ResourceSet

    provider = DataProvider.objects.create(slug="bench", name="Bench")
    resource_set = ResourceSet.objects.create(
        provider=provider, slug="big", name="big", url_prefix="http://data.example.org/bench/"
    )
    CapabilitySettings.objects.create(
        resource_set=resource_set,
        entries_per_document=ENTRIES_PER_DOCUMENT,
        publish_change_list=change_lists,
    )
    return ResourceSet.objects.select_related("provider", "capability_settings").get(
        pk=resource_set.pk
    )


def load(resource_set, size: int) -> None:
    """Write N resources (ids 1..N) and their `created` changes as ingestion would."""
    from django.db import transaction
    from django.utils import timezone

    from sources.bulk import BulkWriter
    from sources.models import Change, Resource
    from sources.services import ChangeRow, ResourceRow

    numbered = collections.namedtuple("NumberedResourceRow", ["id", *ResourceRow._fields])
    resources = BulkWriter(Resource, numbered)
    changes = BulkWriter(Change, ChangeRow)
    received = timezone.now()
    set_id = resource_set.pk
    for start in range(0, size, COMMIT_EVERY):
        with transaction.atomic():
            for chunk in range(start, min(start + COMMIT_EVERY, size), LOAD_CHUNK):
                resource_rows, change_rows = [], []
                for n in range(chunk, min(chunk + LOAD_CHUNK, size)):
                    event = make_event(n)
                    values = {
                        "location_type": event.location_type,
                        "location_value": event.location_value,
                        "uri": event.uri,
                        "length": event.length,
                        "md5": event.md5,
                        "sha256": event.sha256,
                        "mime": event.mime,
                        "lastmod": event.lastmod,
                        "ln": [link.as_json() for link in event.links],
                    }
                    resource_rows.append(
                        numbered(id=n + 1, resource_set=set_id, timestamp=received, **values)
                    )
                    change_rows.append(
                        ChangeRow(
                            resource_set=set_id, resource_key=n + 1, change="created",
                            datetime=received + timedelta(microseconds=n), timestamp=received,
                            event_id="", indexed=False, **values,
                        )
                    )  # fmt: skip
                resources.insert(resource_rows)
                changes.insert(change_rows)
    reset_sequences(Resource)


def reset_sequences(*models) -> None:
    """After rows written with their ids, the next default id follows them (PostgreSQL)."""
    from django.core.management.color import no_style
    from django.db import connection

    with connection.cursor() as cursor:
        for statement in connection.ops.sequence_reset_sql(no_style(), models):
            cursor.execute(statement)


def ingest(resource_set, event) -> None:
    """One event through the real service, with the `events_ingested` receivers muted.

    They would index and regenerate at once (eager Celery); the bench
    runs those steps itself so it can time them and read the report.
    """
    from sources import services
    from sources.signals import events_ingested, receivers_muted

    with receivers_muted(events_ingested):
        result = services.ingest_events(resource_set=resource_set, events=[event])
    check(getattr(result, event.change) == 1, f"the event was not applied: {result.counts()}")


# Measuring


def reset_peak_rss() -> bool:
    """Reset this process's high-water RSS (Linux), so each phase reports its own peak."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def process_tree(pid: int) -> list[int]:
    """`pid` and its live descendants."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        for children in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                queue += [int(child) for child in children.read_text().split()]
            except OSError:
                continue  # it just exited
    return found


def memory_kib(pid: int) -> tuple[int, int]:
    """(Rss, Pss) of one process, 0 if it is gone."""
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return 0, 0
    values = dict(line.split()[:2] for line in lines if line.startswith(("Rss:", "Pss:")))
    return int(values.get("Rss:", 0)), int(values.get("Pss:", 0))


class MemorySampler(threading.Thread):
    """Peak memory of this process and its workers, sampled every SAMPLE_SECONDS.

    A forked worker's resident size counts the pages it still shares with
    this process; summing proportional set sizes counts each page once.
    """

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_total_pss = self.peak_rss = 0
        self.stopping = threading.Event()

    def sample(self) -> None:
        sizes = [memory_kib(pid) for pid in process_tree(os.getpid())]
        self.peak_rss = max(self.peak_rss, *(rss for rss, _ in sizes))
        self.peak_total_pss = max(self.peak_total_pss, sum(pss for _, pss in sizes))

    def run(self) -> None:
        while not self.stopping.wait(SAMPLE_SECONDS):
            self.sample()

    def stop(self) -> dict[str, float]:
        self.stopping.set()
        self.join()
        self.sample()
        return {
            "total_pss": round(self.peak_total_pss / 1024, 1),
            "largest_rss": round(self.peak_rss / 1024, 1),
        }


def rss_mib() -> float:
    return round(memory_kib(os.getpid())[0] / 1024, 1)


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


@contextmanager
def measured(figures: dict[str, Any]) -> Iterator[None]:
    """Wall and CPU time (this process and its workers), peak memory and load around a block."""
    peak_reset = reset_peak_rss()
    figures["rss_at_start_mib"] = rss_mib()
    figures["load_before"] = load_average()
    sampler = MemorySampler()
    sampler.start()
    cpu, started = cpu_seconds(), time.perf_counter()
    try:
        yield
    finally:
        figures["seconds"] = round(time.perf_counter() - started, 3)
        figures["cpu_seconds"] = round(cpu_seconds() - cpu, 3)
        figures["peak_memory_mib"] = sampler.stop()
        own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        figures["peak_memory_mib"]["process_rss"] = round(own_peak, 1)
        figures["peak_rss_is_phase_peak"] = peak_reset
        figures["load_after"] = load_average()


def in_children(function: Callable[..., Any], calls: list[tuple[Any, ...]]) -> list[Any]:
    """`function(*args)` for each args in `calls`, at once, each in a forked process.

    Their memory never counts in this process's figures; an exception in one
    is raised here.
    """
    from django.db import connections

    connections.close_all()  # each child opens its own
    context = multiprocessing.get_context("fork")
    started = []
    for args in calls:
        reader, writer = context.Pipe(duplex=False)

        def target(args: tuple[Any, ...] = args, writer: Any = writer) -> None:
            try:
                writer.send((True, function(*args)))
            except BaseException as error:
                writer.send((False, error))
            finally:
                connections.close_all()

        process = context.Process(target=target)
        process.start()
        writer.close()
        started.append((process, reader))
    outcomes = []
    for process, reader in started:
        try:
            outcomes.append(reader.recv())
        except EOFError:
            outcomes.append((False, BenchFailure(f"{function.__name__} died in its process")))
        process.join()
    for succeeded, value in outcomes:
        if not succeeded:
            raise value
    return [value for _, value in outcomes]


def in_child(function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` in a forked process: its memory never counts here."""
    return in_children(function, [args])[0]


# Checking


def read(name: str) -> bytes:
    from sitemaps.storage import document_storage

    with document_storage().open(name, "rb") as handle:
        return handle.read()


def check_stored(name: str, etag: str, size: int) -> bytes:
    from sitemaps.storage import GZIP_SUFFIX, content_etag

    content = read(name)
    check(len(content) == size, f"{name}: {len(content)} bytes stored, {size} recorded")
    check(content_etag(content) == etag, f"{name}: ETag does not match the content")
    check(gzip.decompress(read(name + GZIP_SUFFIX)) == content, f"{name}: gzip twin differs")
    return content


def check_documents(
    resource_set, expected: Expected, compact: bool, only: list[int] | None = None
) -> dict[str, int]:
    """Every document of the Resource List against the data.

    `compact`: pages as a first run lays them out, all full but the last.
    `only`: read just these pages (the others by their recorded key ranges and
    counts), for sets too large to reread after each change.
    """
    from lxml import etree

    from sitemaps import links
    from sitemaps.models import IndexDocument, ResourceListPage

    pages = list(ResourceListPage.objects.filter(resource_set=resource_set).order_by("after_key"))
    if compact:
        wanted_pages = max(1, math.ceil(expected.present / ENTRIES_PER_DOCUMENT))
        check(len(pages) == wanted_pages, f"{len(pages)} pages, expected {wanted_pages}")

    index = IndexDocument.objects.get(resource_set=resource_set, kind="resourcelist")
    root = etree.fromstring(check_stored(index.storage_name, index.etag, index.size))
    if len(pages) > 1:
        check(root.tag == f"{SM}sitemapindex", f"the index is a {root.tag}")
        listed = [loc.text for loc in root.iter(f"{SM}loc")]
        wanted = [links.resource_list_page_url(resource_set, page.number) for page in pages]
        check(listed == wanted, "the index does not list exactly the pages, in key order")

    after = 0
    for page in pages:
        check(page.after_key == after, f"page {page.number} starts after key {page.after_key}")
        last = page.through_key
        check((last is None) == (page is pages[-1]), f"page {page.number} ends at {last}")
        numbers = (n for n in range(after, last or expected.count) if n not in expected.deleted)
        if only is None or page.number in only:
            check_page(page, numbers, expected.versions)
        else:
            check(sum(1 for _ in numbers) == page.entries, f"page {page.number}: entries differ")
        check(page.entries <= ENTRIES_PER_DOCUMENT, f"page {page.number}: {page.entries} entries")
        if compact and page is not pages[-1]:
            check(page.entries == ENTRIES_PER_DOCUMENT, f"page {page.number}: {page.entries}")
        after = last or 0
    entries = sum(page.entries for page in pages)
    check(entries == expected.present, f"{entries} entries in all, expected {expected.present}")
    return {"entries": entries, "pages": len(pages), "bytes": sum(page.size for page in pages)}


def check_page(page, numbers: Iterator[int], versions: dict[int, int]) -> None:
    """One stored page lists exactly resources `numbers`, in order, with their hashes."""
    from lxml import etree

    content = check_stored(page.storage_name, page.etag, page.size)
    on_page = 0
    for _, element in etree.iterparse(io.BytesIO(content), tag=f"{SM}url"):
        loc = element.findtext(f"{SM}loc")
        n = next(numbers, None)
        check(n is not None, f"page {page.number} holds more entries than its key range")
        check(loc == resource_uri(n), f"page {page.number}: {loc!r} where {n} was expected")
        hash_value = element.find(f"{RS}md").get("hash")
        wanted_hash = f"md5:{resource_md5(n, versions.get(n, 1))}"
        check(hash_value == wanted_hash, f"{loc}: hash {hash_value}, not {wanted_hash}")
        element.clear()
        on_page += 1
    check(next(numbers, None) is None, f"page {page.number} misses entries of its key range")
    check(on_page == page.entries, f"page {page.number}: {on_page} entries, {page.entries} kept")


def page_holding(resource_set, key: int) -> int:
    from sitemaps.models import ResourceListPage

    for page in ResourceListPage.objects.filter(resource_set=resource_set).order_by("after_key"):
        if page.after_key < key and (page.through_key is None or key <= page.through_key):
            return page.number
    raise BenchFailure(f"no page holds key {key}")


# Phases


#: Settings entries by backend; the Elasticsearch one is the environment's (`configure`).
GENERATOR_ENTRIES: dict[str, dict[str, Any]] = {}


def use_generator(backend: str) -> None:
    from django.conf import settings

    entry = GENERATOR_ENTRIES.get(backend, {"BACKEND": backend})
    settings.RESOURCESYNC_GENERATORS = {"default": entry}


def forget_resource_list(resource_set) -> None:
    """Drop the Resource List's pages, so the next run is a first (initial) one."""
    from sitemaps.models import IndexDocument, RegenerationState, ResourceListPage
    from sitemaps.storage import delete_document

    for document in [
        *ResourceListPage.objects.filter(resource_set=resource_set),
        *IndexDocument.objects.filter(resource_set=resource_set, kind="resourcelist"),
    ]:
        delete_document(document.storage_name)
        document.delete()
    RegenerationState.objects.filter(resource_set=resource_set).delete()


def timed_regeneration(
    resource_set, expected: Expected, only: list[int] | None = None
) -> dict[str, Any]:
    """A full regeneration, then its documents checked (`only`: check_documents)."""
    from sitemaps.regeneration import regenerate

    figures: dict[str, Any] = {}
    with measured(figures):
        report = regenerate(resource_set, full=True)
    check(report is not None, "another regeneration held the set")
    figures["report_seconds"] = round(report.seconds, 3)
    figures["pages_written"] = len(report.resource_pages_written)
    figures["indexes_written"] = report.indexes_written
    figures.update(in_child(check_documents, resource_set, expected, True, only))
    figures["entries_per_second"] = round(expected.present / figures["seconds"])
    return figures


def run_generator(name: str, resource_set, args, expected: Expected, serial: int) -> dict:
    """The initial, full, update, delete and create runs from one generator."""
    results: dict[str, Any] = {}
    forget_resource_list(resource_set)
    results["initial"] = timed_regeneration(resource_set, expected)
    say(f"{name}: initial", results["initial"])
    runs = []
    for _ in range(args.repeat):
        runs.append(timed_regeneration(resource_set, expected))
        say(f"{name}: full", runs[-1])
        check(runs[-1]["pages_written"] == results["initial"]["pages"], "a page was not rewritten")
    results["full"] = {
        "runs": runs,
        "median_seconds": statistics.median(run["seconds"] for run in runs),
        "median_entries_per_second": round(
            statistics.median(run["entries_per_second"] for run in runs)
        ),
        # The larger of the two views, so never an underestimate (see the docstring).
        "max_peak_rss_mib": max(
            max(run["peak_memory_mib"]["total_pss"], run["peak_memory_mib"]["largest_rss"])
            for run in runs
        ),
    }
    # Different resources per generator; `serial` keeps them apart.
    changes = [
        ("update", "updated", args.size // 2 + serial),
        ("delete", "deleted", args.size // 4 + serial),
        ("create", "created", expected.count),
    ]
    for phase, change, n in changes:
        results[phase] = timed_change(name, resource_set, args, expected, change, n)
    return results


def timed_change(name: str, resource_set, args, expected: Expected, change: str, n: int) -> dict:
    """One event, then a regeneration that must rewrite the page holding it and the index."""
    from sitemaps.regeneration import regenerate
    from sources.generators import get_generator
    from sources.models import Resource
    from sources.signals import changes_indexed, receivers_muted

    key = n + 1
    figures: dict[str, Any] = {"key": key, "page": page_holding(resource_set, key)}
    version = expected.versions.get(n, 1) + 1 if change == "updated" else 1
    started = time.perf_counter()
    ingest(resource_set, make_event(n, change, version))
    with receivers_muted(changes_indexed):  # it would regenerate at once (eager Celery)
        get_generator().index_pending(resource_set.pk)
    figures["ingest_seconds"] = round(time.perf_counter() - started, 3)
    if change == "updated":
        expected.versions[n] = version
    elif change == "deleted":
        expected.deleted.add(n)
    else:
        check(n == expected.count, f"created {n} after {expected.count} resources")
        stored = Resource.objects.get(resource_set=resource_set, uri=resource_uri(n)).pk
        check(stored == key, f"the new resource has key {stored}, not {key}")
        expected.count += 1
    with measured(figures):
        report = regenerate(resource_set)
    check(report is not None, "another regeneration held the set")
    # Where the key is now: past an exactly full tail, a new key opens a new page.
    figures["page"] = page_holding(resource_set, key)
    written = report.resource_pages_written
    check(figures["page"] in written, f"pages {written} rewritten, not page {figures['page']}")
    if change == "updated":
        check(written == [figures["page"]], f"pages {written} rewritten, not [{figures['page']}]")
    check("resourcelist.xml" in report.indexes_written, "the Resource List Index was not rewritten")
    if not args.change_lists:
        check(report.indexes_written == ["resourcelist.xml"], f"rewrote {report.indexes_written}")
    figures["report_seconds"] = round(report.seconds, 3)
    figures["pages_written"] = written
    figures["indexes_written"] = report.indexes_written
    # A large set (large_set.py) rereads only the rewritten pages.
    only = written if getattr(args, "only_written_pages", False) else None
    figures.update(in_child(check_documents, resource_set, expected, False, only))
    say(f"{name}: {change}", figures)
    return figures


def mirror(resource_set, expected: Expected) -> dict[str, Any]:
    """Drop and refill this bench's indices through `sources.indexing`.

    `index_pending` takes its changes in batches, one after the other;
    here each CPU takes a share of them, in the same batches, to the same
    `index_changes`. A last `index_pending` must then find none.
    """
    from sources.generators import get_generator
    from sources.models import Change

    use_generator(ELASTICSEARCH)
    generator = get_generator()
    drop_indices()
    generator.mirror.ensure_indices()
    pending = list(
        Change.objects.filter(resource_set=resource_set, indexed=False)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    workers = os.cpu_count() or 1
    share = math.ceil(len(pending) / workers)
    figures: dict[str, Any] = {}
    with measured(figures):
        calls = [(pending[start : start + share],) for start in range(0, len(pending), share)]
        figures["changes_indexed"] = sum(in_children(index_share, calls))
    check(not generator.index_pending(resource_set.pk), "changes were left unindexed")
    check(figures["changes_indexed"] == len(pending), f"indexed {figures['changes_indexed']}")
    count = generator.count_resources(resource_set)
    check(count == expected.present, f"Elasticsearch holds {count}, not {expected.present}")
    figures["changes_per_second"] = round(figures["changes_indexed"] / figures["seconds"])
    figures["indices"] = index_stats(generator.mirror.client)
    say("elasticsearch: indexing", figures)
    return figures


def index_share(keys: list[int]) -> int:
    """Index these changes as `index_pending` does: its batches, its `index_changes`."""
    from sources.generators import get_generator
    from sources.indexing import BATCH_SIZE

    # A forked child: the mirror builds a client of its own.
    mirror = get_generator().mirror
    done = 0
    for start in range(0, len(keys), BATCH_SIZE):
        done += mirror.index_changes(keys[start : start + BATCH_SIZE])
    return done


def index_stats(client) -> dict[str, Any]:
    """Disk and Lucene documents (nested ones included) of this bench's indices, refreshed."""
    pattern = f"{os.environ['ELASTICSEARCH_INDEX_PREFIX']}-*"
    client.indices.refresh(index=pattern)
    stats = client.indices.stats(index=pattern, metric="store,docs")["indices"]
    return {
        name: {
            "store_bytes": figures["primaries"]["store"]["size_in_bytes"],
            "lucene_docs": figures["primaries"]["docs"]["count"],
        }
        for name, figures in stats.items()
    }


def database_bytes() -> int:
    """Disk the database uses: the SQLite file and its WAL, or the PostgreSQL database."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_database_size(current_database())")
            return cursor.fetchone()[0]
    path = Path(connection.settings_dict["NAME"])
    files = (path, path.with_name(path.name + "-wal"))
    return sum(file.stat().st_size for file in files if file.exists())


def drop_indices() -> None:
    from sources.generators import get_generator

    use_generator(ELASTICSEARCH)
    get_generator().mirror.delete_indices()


def say(what: str, figures: dict[str, Any]) -> None:
    shown = {key: value for key, value in figures.items() if not isinstance(value, list | dict)}
    print(f"  {what}: {shown}", file=sys.stderr, flush=True)


# Main


def configure(work: Path, args: argparse.Namespace, database: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "resourcesync_portal.settings"
    os.environ["DATA_DIR"] = str(work)
    os.environ["DATABASE_URL"] = database
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    for name in ("CELERY_BROKER_URL", "RESOURCESYNC_STORAGE_BACKEND"):
        os.environ.pop(name, None)
    os.environ.pop("RESOURCESYNC_MAX_DOCUMENT_BYTES", None)
    if args.elasticsearch:
        os.environ["ELASTICSEARCH_URL"] = args.elasticsearch
        os.environ["ELASTICSEARCH_INDEX_PREFIX"] = args.index_prefix
    else:
        os.environ.pop("ELASTICSEARCH_URL", None)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.conf import settings

    if args.elasticsearch:
        GENERATOR_ENTRIES[ELASTICSEARCH] = settings.RESOURCESYNC_GENERATORS["default"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="resources (1,000,000)")
    parser.add_argument("--repeat", type=int, default=3, help="full regenerations per generator")
    parser.add_argument("--elasticsearch", metavar="URL", help="also run from this node")
    parser.add_argument("--index-prefix", default="bench-rl", help="of this bench's indices")
    parser.add_argument("--change-lists", action="store_true", help="publish Change Lists too")
    parser.add_argument("--output", type=Path, help="results JSON (bench/results/...)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder and indices")
    add_database_argument(parser)
    args = parser.parse_args(argv)
    if args.size < 10 or args.repeat < 1:
        parser.error("--size must be at least 10 and --repeat at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = datetime.now().strftime("%Y-%m-%dT%H%M%S")
    output = args.output or RESULTS / f"resource_list-{stamp}.json"
    work = WORK / f"resource_list-{stamp}-{os.getpid()}"
    work.mkdir(parents=True)
    with database_url(work, args.postgres, "resource_list", keep=args.keep) as database:
        configure(work, args, database)
        try:
            results = run(args, work)
        finally:
            if not args.keep:
                if args.elasticsearch:
                    drop_indices()
                shutil.rmtree(work, ignore_errors=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2) + "\n")
    for line in summary(results):
        print(line)
    print(f"results: {output}")
    return 0


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    resource_set = make_set(args.change_lists)
    results: dict[str, Any] = {
        "size": args.size,
        "database_engine": database_name(args.postgres),
        "entries_per_document": ENTRIES_PER_DOCUMENT,
        "change_lists": args.change_lists,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "work": str(work),
    }
    figures: dict[str, Any] = {}
    with measured(figures):
        in_child(load, resource_set, args.size)
    results["load"] = figures
    results["database_bytes"] = database_bytes()
    say("load", figures)
    expected = Expected(args.size)
    use_generator(DATABASE)
    results["database"] = run_generator("database", resource_set, args, expected, serial=0)
    if args.elasticsearch:
        results["elasticsearch_indexing"] = mirror(resource_set, expected)
        results["elasticsearch"] = run_generator(
            "elasticsearch", resource_set, args, expected, serial=1
        )
    results["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    return results


def summary(results: dict[str, Any]) -> Iterator[str]:
    yield f"Resource List of {results['size']:,} resources, {ENTRIES_PER_DOCUMENT:,} per page:"
    stored = results["database_bytes"]
    yield (
        f"  {results['database_engine']} database after the load: {stored / 2**20:,.1f} MiB"
        f" ({stored / results['size']:,.0f} bytes per resource with its change)"
    )
    for name, figures in results.get("elasticsearch_indexing", {}).get("indices", {}).items():
        yield (
            f"  {name}: {figures['store_bytes'] / 2**20:,.1f} MiB,"
            f" {figures['lucene_docs']:,} Lucene documents (nested ones included)"
        )
    for name in ("database", "elasticsearch"):
        if name not in results:
            continue
        runs = results[name]
        initial, full = runs["initial"], runs["full"]
        memory, rate = initial["peak_memory_mib"], initial["entries_per_second"]
        yield (
            f"  {name:<13} initial {initial['seconds']:6.2f} s ({rate:,}/s,"
            f" {initial['cpu_seconds']:.1f} CPU-s, peak {memory['total_pss']:.0f} MiB PSS,"
            f" load {initial['load_before'][0]:.2f})"
        )
        each = ", ".join(
            f"{run['seconds']:.2f} ({run['cpu_seconds']:.1f} CPU-s,"
            f" load {run['load_before'][0]:.1f})"
            for run in full["runs"]
        )
        yield (
            f"  {name:<13} full    {full['median_seconds']:6.2f} s median of {len(full['runs'])}"
            f" ({full['median_entries_per_second']:,}/s, peak {full['max_peak_rss_mib']:.0f} MiB):"
            f" {each}"
        )
        for phase in ("update", "delete", "create"):
            change = runs[phase]
            yield (
                f"  {name:<13} {phase:<7} {change['seconds']:6.2f} s (pages"
                f" {change['pages_written']} + {', '.join(change['indexes_written'])};"
                f" ingest {change['ingest_seconds']:.2f} s)"
            )


if __name__ == "__main__":
    sys.exit(main())
