"""Time a full Resource List of N resources, from the database and from Elasticsearch.

    .venv/bin/python bench/resource_list.py [--size 1000000] [--repeat 3]
        [--elasticsearch http://127.0.0.1:9250 [--index-prefix bench-rl]]
        [--change-lists] [--output FILE] [--keep]

A fresh SQLite database and document store live under bench/work/ (git-ignored).
N resources, each with the `created` change ingestion would have logged, are
written with the ingestion service's batch writer. Then, per generator:

- initial: the first regeneration, which finds the page boundaries as it goes;
- full: `regenerate(full=True)` over the existing pages, `--repeat` times;
- update: one `updated` event through `ingest_events`, then `regenerate()`,
  which must rewrite exactly the page holding it and the index.

Every run is checked before a figure is kept: the index lists every page, the
pages hold each resource exactly once and in key order (the updated one with
its new hash), sizes, ETags and gzip twins match. Any failed check raises, so
the script exits non-zero instead of reporting numbers from a broken run.

With `--elasticsearch` the data is mirrored by `sources.indexing` into indices
named after `--index-prefix` (dropped first, and after the run unless --keep),
and the phases run again from the Elasticsearch generator. The set publishes
only its Resource List, which is what the targets are about; `--change-lists`
adds its Change Lists to every regeneration.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import os
import resource
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "bench" / "work"
RESULTS = REPO / "bench" / "results"

ENTRIES_PER_DOCUMENT = 50_000
LOAD_CHUNK = 10_000
COMMIT_EVERY = 100_000
DATABASE = "sources.generators.database.DatabaseGenerator"
ELASTICSEARCH = "sources.generators.elasticsearch.ElasticsearchGenerator"

# Data shaped like a harvested set: distinct hashes, sizes and times (a quarter
# with microseconds), a few MIME types, a describedby link on every resource,
# and one URI in a thousand with a query string that needs escaping.
FIRST_LASTMOD = datetime(2020, 1, 1, tzinfo=UTC)
MIMES = ("text/plain", "application/pdf", "image/jpeg", "text/html; charset=utf-8")


class BenchFailure(AssertionError):
    """A run whose documents are wrong: no figure from it may be reported."""


def check(condition: bool, message: str) -> None:
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
    from sources.services import RESOURCE_UPDATE_FIELDS

    resources = BulkWriter(Resource, ["id", "resource_set", "uri", *RESOURCE_UPDATE_FIELDS])
    changes = BulkWriter(
        Change,
        ["resource_set", "resource_key", "change", "location_type", "location_value", "uri",
         "length", "md5", "sha256", "mime", "lastmod", "ln", "datetime", "timestamp",
         "event_id", "indexed"],
    )  # fmt: skip
    received = timezone.now()
    set_id = resource_set.pk
    for start in range(0, size, COMMIT_EVERY):
        with transaction.atomic():
            for chunk in range(start, min(start + COMMIT_EVERY, size), LOAD_CHUNK):
                resource_rows, change_rows = [], []
                for n in range(chunk, min(chunk + LOAD_CHUNK, size)):
                    event = make_event(n)
                    values = [
                        event.location_type, event.location_value, event.length, event.md5,
                        event.sha256, event.mime, event.lastmod,
                        [link.as_json() for link in event.links],
                    ]  # fmt: skip
                    resource_rows.append([n + 1, set_id, event.uri, *values, received])
                    change_rows.append(
                        [set_id, n + 1, "created", *values[:2], event.uri, *values[2:],
                         received + timedelta(microseconds=n), received, "", False]
                    )  # fmt: skip
                resources.insert(resource_rows)
                changes.insert(change_rows)


def ingest_update(resource_set, n: int, version: int) -> None:
    """One `updated` event through the real service, with the after-commit hooks detached.

    The hooks would index and regenerate at once (eager Celery); the bench
    runs those steps itself so it can time them and read the report.
    """
    from sources import services

    hooks = services.after_ingest_hooks[:]
    services.after_ingest_hooks.clear()
    try:
        result = services.ingest_events(
            resource_set=resource_set, events=[make_event(n, "updated", version)]
        )
    finally:
        services.after_ingest_hooks[:] = hooks
    check(result.updated == 1, f"the update was not applied: {result.counts()}")


# Measuring


def reset_peak_rss() -> bool:
    """Reset this process's high-water RSS (Linux), so each phase reports its own peak."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_rss_mib() -> dict[str, float]:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"process": round(own, 1), "largest_child": round(children, 1)}


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


@contextmanager
def measured(figures: dict[str, Any]) -> Iterator[None]:
    """Wall and CPU time (this process and its children), peak RSS and load around a block."""
    peak_reset = reset_peak_rss()
    figures["load_before"] = load_average()
    cpu, started = cpu_seconds(), time.perf_counter()
    yield
    figures["seconds"] = round(time.perf_counter() - started, 3)
    figures["cpu_seconds"] = round(cpu_seconds() - cpu, 3)
    figures["peak_rss_mib"] = peak_rss_mib()
    figures["peak_rss_is_phase_peak"] = peak_reset
    figures["load_after"] = load_average()


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


def check_documents(resource_set, size: int, updated: dict[int, int]) -> dict[str, int]:
    """Every document of the Resource List, against the data; `updated` maps n to version."""
    from lxml import etree

    from sitemaps import links
    from sitemaps.models import IndexDocument, ResourceListPage

    sm = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
    rs = "{http://www.openarchives.org/rs/terms/}"
    pages = list(ResourceListPage.objects.filter(resource_set=resource_set).order_by("after_key"))
    expected_pages = max(1, math.ceil(size / ENTRIES_PER_DOCUMENT))
    check(len(pages) == expected_pages, f"{len(pages)} pages, expected {expected_pages}")

    index = IndexDocument.objects.get(resource_set=resource_set, kind="resourcelist")
    root = etree.fromstring(check_stored(index.storage_name, index.etag, index.size))
    if expected_pages > 1:
        check(root.tag == f"{sm}sitemapindex", f"the index is a {root.tag}")
        listed = [loc.text for loc in root.iter(f"{sm}loc")]
        wanted = [links.resource_list_page_url(resource_set, page.number) for page in pages]
        check(listed == wanted, "the index does not list exactly the pages, in key order")

    n = 0
    for page in pages:
        content = check_stored(page.storage_name, page.etag, page.size)
        on_page = 0
        for _, element in etree.iterparse(_stream(content), tag=f"{sm}url"):
            loc = element.findtext(f"{sm}loc")
            check(n < size, f"page {page.number} holds more than {size} entries in all")
            check(loc == resource_uri(n), f"page {page.number}: {loc!r} where {n} was expected")
            if n in updated:
                md = element.find(f"{rs}md")
                expected = f"md5:{resource_md5(n, updated[n])}"
                check(md.get("hash") == expected, f"{loc}: hash {md.get('hash')}, not {expected}")
            element.clear()
            n += 1
            on_page += 1
        check(on_page == page.entries, f"page {page.number}: {on_page} entries, {page.entries} recorded")
        if page is not pages[-1]:
            check(on_page == ENTRIES_PER_DOCUMENT, f"page {page.number} holds {on_page} entries")
    check(n == size, f"{n} entries in all, expected {size}")
    return {"entries": n, "pages": len(pages), "bytes": sum(page.size for page in pages)}


def _stream(content: bytes):
    import io

    return io.BytesIO(content)


def page_holding(resource_set, key: int) -> int:
    from sitemaps.models import ResourceListPage

    for page in ResourceListPage.objects.filter(resource_set=resource_set).order_by("after_key"):
        if page.after_key < key and (page.through_key is None or key <= page.through_key):
            return page.number
    raise BenchFailure(f"no page holds key {key}")


# Phases


def use_generator(backend: str) -> None:
    from django.conf import settings

    settings.RESOURCESYNC_GENERATORS = {"default": {"BACKEND": backend}}


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


def timed_regeneration(resource_set, size: int, updated: dict[int, int], *, full: bool) -> dict:
    from sitemaps.regeneration import regenerate

    figures: dict[str, Any] = {}
    with measured(figures):
        report = regenerate(resource_set, full=full)
    check(report is not None, "another regeneration held the set")
    figures["report_seconds"] = round(report.seconds, 3)
    figures["pages_written"] = len(report.resource_pages_written)
    figures["indexes_written"] = report.indexes_written
    figures.update(check_documents(resource_set, size, updated))
    figures["entries_per_second"] = round(size / figures["seconds"])
    return figures


def run_generator(name: str, resource_set, args, updated: dict[int, int], version: int) -> dict:
    """The initial, full and update runs from one generator."""
    results: dict[str, Any] = {}
    size = args.size
    forget_resource_list(resource_set)
    results["initial"] = timed_regeneration(resource_set, size, updated, full=True)
    say(f"{name}: initial", results["initial"])
    runs = []
    for _ in range(args.repeat):
        runs.append(timed_regeneration(resource_set, size, updated, full=True))
        say(f"{name}: full", runs[-1])
        check(runs[-1]["pages_written"] == results["initial"]["pages"], "a page was not rewritten")
    results["full"] = {
        "runs": runs,
        "median_seconds": statistics.median(run["seconds"] for run in runs),
        "median_entries_per_second": round(statistics.median(run["entries_per_second"] for run in runs)),
        "max_peak_rss_mib": max(run["peak_rss_mib"]["process"] for run in runs),
    }
    results["update"] = timed_update(name, resource_set, args, updated, version)
    return results


def timed_update(name: str, resource_set, args, updated: dict[int, int], version: int) -> dict:
    from sitemaps.regeneration import regenerate
    from sources.indexing import index_pending_changes

    n = args.size // 2 + version  # a key in the middle, a different one per generator
    figures: dict[str, Any] = {"key": n + 1, "page": page_holding(resource_set, n + 1)}
    started = time.perf_counter()
    ingest_update(resource_set, n, version)
    if name == "elasticsearch":
        index_pending_changes(resource_set.pk)
    figures["ingest_seconds"] = round(time.perf_counter() - started, 3)
    updated[n] = version
    with measured(figures):
        report = regenerate(resource_set)
    check(report is not None, "another regeneration held the set")
    check(
        report.resource_pages_written == [figures["page"]],
        f"pages {report.resource_pages_written} rewritten, expected [{figures['page']}]",
    )
    check("resourcelist.xml" in report.indexes_written, "the Resource List Index was not rewritten")
    if not args.change_lists:
        check(report.indexes_written == ["resourcelist.xml"], f"rewrote {report.indexes_written}")
    figures["report_seconds"] = round(report.seconds, 3)
    figures["pages_written"] = report.resource_pages_written
    figures["indexes_written"] = report.indexes_written
    figures.update(check_documents(resource_set, args.size, updated))
    say(f"{name}: update", figures)
    return figures


def mirror(resource_set, args) -> dict:
    """Drop and refill this bench's indices through `sources.indexing`."""
    from sources.generators import get_generator
    from sources.indexing import client, ensure_indices, index_pending_changes

    drop_indices()
    ensure_indices()
    figures: dict[str, Any] = {}
    with measured(figures):
        figures["changes_indexed"] = index_pending_changes(resource_set.pk)
    use_generator(ELASTICSEARCH)
    count = get_generator().count_resources(resource_set)
    check(count == args.size, f"Elasticsearch holds {count} resources, expected {args.size}")
    figures["documents_per_second"] = round(2 * args.size / figures["seconds"])
    figures["node"] = client().info(filter_path=["version.number"])["version"]["number"]
    say("elasticsearch: indexing", figures)
    return figures


def drop_indices() -> None:
    from sources.documents import changes_index, resources_index
    from sources.indexing import client

    names = f"{resources_index._name},{changes_index._name}"
    client().indices.delete(index=names, ignore_unavailable=True)


def say(what: str, figures: dict[str, Any]) -> None:
    shown = {key: value for key, value in figures.items() if not isinstance(value, list | dict)}
    print(f"  {what}: {shown}", file=sys.stderr, flush=True)


# Main


def configure(work: Path, args: argparse.Namespace) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "resourcesync_portal.settings"
    os.environ["DATA_DIR"] = str(work)
    os.environ["DATABASE_URL"] = f"sqlite:///{work / 'db.sqlite3'}"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    for name in ("CELERY_BROKER_URL", "RESOURCESYNC_STORAGE_BACKEND", "RESOURCESYNC_MAX_DOCUMENT_BYTES"):
        os.environ.pop(name, None)
    if args.elasticsearch:
        os.environ["ELASTICSEARCH_URL"] = args.elasticsearch
        os.environ["ELASTICSEARCH_INDEX_PREFIX"] = args.index_prefix
    else:
        os.environ.pop("ELASTICSEARCH_URL", None)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import django

    django.setup()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="resources (1,000,000)")
    parser.add_argument("--repeat", type=int, default=3, help="full regenerations per generator")
    parser.add_argument("--elasticsearch", metavar="URL", help="also run from this node")
    parser.add_argument("--index-prefix", default="bench-rl", help="of this bench's indices")
    parser.add_argument("--change-lists", action="store_true", help="publish Change Lists too")
    parser.add_argument("--output", type=Path, help="results JSON (bench/results/...)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder and indices")
    args = parser.parse_args(argv)
    if args.size < 1 or args.repeat < 1:
        parser.error("--size and --repeat must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = datetime.now().strftime("%Y-%m-%dT%H%M%S")
    output = args.output or RESULTS / f"resource_list-{stamp}.json"
    work = WORK / f"resource_list-{stamp}-{os.getpid()}"
    work.mkdir(parents=True)
    configure(work, args)
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
        "entries_per_document": ENTRIES_PER_DOCUMENT,
        "change_lists": args.change_lists,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "work": str(work),
    }
    figures: dict[str, Any] = {}
    with measured(figures):
        load(resource_set, args.size)
    results["load"] = figures
    say("load", figures)
    updated: dict[int, int] = {}
    use_generator(DATABASE)
    results["database"] = run_generator("database", resource_set, args, updated, version=2)
    if args.elasticsearch:
        results["elasticsearch_indexing"] = mirror(resource_set, args)
        results["elasticsearch"] = run_generator(
            "elasticsearch", resource_set, args, updated, version=3
        )
    results["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    return results


def summary(results: dict[str, Any]) -> Iterator[str]:
    size = results["size"]
    yield f"Resource List of {size:,} resources, {ENTRIES_PER_DOCUMENT:,} per page:"
    for name in ("database", "elasticsearch"):
        if name not in results:
            continue
        runs = results[name]
        initial, full, update = runs["initial"], runs["full"], runs["update"]
        each = ", ".join(f"{run['seconds']:.2f}" for run in full["runs"])
        yield (
            f"  {name:<13} initial {initial['seconds']:6.2f} s "
            f"({initial['entries_per_second']:,}/s, peak RSS {initial['peak_rss_mib']['process']:.0f} MiB, "
            f"load {initial['load_before'][0]:.2f})"
        )
        yield (
            f"  {name:<13} full    {full['median_seconds']:6.2f} s median of {len(full['runs'])} "
            f"({full['median_entries_per_second']:,}/s, peak RSS {full['max_peak_rss_mib']:.0f} MiB, "
            f"runs {each})"
        )
        yield (
            f"  {name:<13} update  {update['seconds']:6.2f} s "
            f"(page {update['page']} + {', '.join(update['indexes_written'])}; "
            f"ingest {update['ingest_seconds']:.2f} s)"
        )


if __name__ == "__main__":
    sys.exit(main())
