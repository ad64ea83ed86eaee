"""A 10,000,000-resource set on PostgreSQL, database generator: regeneration, changes, ingest, disk.

    .venv/bin/python bench/large_set.py --postgres postgres://resourcesync@127.0.0.1:5460/resourcesync
        [--size 10000000] [--repeat 1] [--http-events 100000] [--batch 10000]
        [--redis redis://127.0.0.1:6399/1] [--output FILE] [--keep]

A fresh database on that server and a work folder under bench/work/. The
set is loaded the fastest honest way, not through the API (10,000,000
events over HTTP would take about half an hour): one `INSERT … SELECT`
over `generate_series` per million rows and table, both tables at once,
writing the very rows `bench/resource_list.py`'s loader writes through the
ingestion service's batch writer (same columns, values and `created` change
per resource; a sample of rows is compared with that loader's events before
any figure is taken), then `VACUUM ANALYZE`, as a long-lived table would be.
Then, from the database generator, each phase timed (wall, CPU of this
process and its page builders, peak memory as in resource_list.py):

- initial: the first regeneration, which lays out the pages;
- full: `regenerate(full=True)`, --repeat times;
- update, delete, create: one event each, then `regenerate()`: pages
  rewritten and time (resource_list.py's phases);
- disk: the two tables with their indexes (`pg_total_relation_size`), the
  database, and the documents folder;
- HTTP ingest: the portal as deployed with the database generator (gunicorn,
  a Celery worker that regenerates after each commit, Redis; no
  Elasticsearch) over this database and documents: --http-events `created`
  events for new resources, then `updated` events spread evenly over the
  whole set, --batch per request; events/s until the last 200, and seconds
  until the Resource List's pages hold them.

Checks (reading 10,000,000 entries back takes longer than writing them):
after the initial run every tenth page and the last are read back (each
resource once, in key order, with its hash) and every other page is checked
by its key range and count; a full run must rewrite every page (checked
by range and count); after a change the rewritten pages are read; after the
HTTP phases the sampled pages are read again.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from bisect import bisect_left
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import resource_list as rl
from common import (
    PORTAL_PORT,
    PROVIDER,
    Portal,
    check,
    event,
    finish,
    log,
    machine,
    ndjson,
    now_iso,
    row,
)

CHUNK = 1_000_000
SAMPLES = 50

#: Resource n (key n + 1) as resource_list.py's loader writes it, in SQL (`%%` is `%`).
VALUES = """
    SELECT n, uri, 1000 + (n * 7919) %% 1000000 AS length, md5(n || ' v1') AS md5,
        (ARRAY['text/plain', 'application/pdf', 'image/jpeg', 'text/html; charset=utf-8'])
            [n %% 4 + 1] AS mime,
        timestamptz '2020-01-01 00:00:00+00' + interval '1 second' * (n * 37 + 86400)
            + interval '1 microsecond' * CASE WHEN n %% 4 = 0 THEN (n * 7919) %% 1000000 ELSE 0 END
            AS lastmod,
        jsonb_build_array(jsonb_build_object('rel', 'describedby',
            'href', jsonb_build_object('type', 'url', 'value', uri || '.xml'),
            'mime', 'application/xml', 'uri', uri || '.xml')) AS ln
    FROM (
        SELECT n, 'http://data.example.org/bench/r/'
            || lpad(n::text, greatest(7, length(n::text)), '0')
            || CASE WHEN n %% 1000 = 999 THEN '?view=full&lang=en' ELSE '' END AS uri
        FROM generate_series(%(first)s::bigint, %(last)s) AS n
    ) AS s
"""
INSERTS = {
    "resources": """
        INSERT INTO {table} (id, resource_set_id, location_type, location_value, uri, length, md5,
            sha256, mime, lastmod, ln, timestamp)
        SELECT n + 1, %(set)s, 'url', uri, uri, length, md5, '', mime, lastmod, ln, %(received)s
        FROM ({values}) AS v""",
    "changes": """
        INSERT INTO {table} (resource_set_id, resource_key, change, location_type,
            location_value, uri, length, md5, sha256, mime, lastmod, ln, datetime, timestamp,
            event_id, indexed)
        SELECT %(set)s, n + 1, 'created', 'url', uri, uri, length, md5, '', mime, lastmod, ln,
            %(received)s + interval '1 microsecond' * n, %(received)s, '', false
        FROM ({values}) AS v""",
}


# Loading


def tables() -> dict[str, str]:
    from sources.models import Change, Resource

    return {"resources": Resource._meta.db_table, "changes": Change._meta.db_table}


def load(url: str, set_id: int, size: int) -> dict[str, Any]:
    """Both tables at once, a million rows a statement; then the sequence and VACUUM ANALYZE."""
    import psycopg
    from django.utils import timezone

    names = tables()
    received = timezone.now()
    errors: list[BaseException] = []

    def fill(kind: str) -> None:
        statement = INSERTS[kind].format(table=names[kind], values=VALUES)
        try:
            with psycopg.connect(url, autocommit=True) as connection:
                for first in range(0, size, CHUNK):
                    last = min(first + CHUNK, size) - 1
                    params = {"first": first, "last": last, "set": set_id, "received": received}
                    connection.execute(statement, params)
                    log(f"load: {kind} {last + 1:,}")
        except BaseException as error:
            errors.append(error)

    figures: dict[str, Any] = {}
    with rl.measured(figures):
        threads = [threading.Thread(target=fill, args=(kind,)) for kind in INSERTS]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as connection:
        resources = names["resources"]
        connection.execute(f"SELECT setval(pg_get_serial_sequence('{resources}', 'id'), {size})")
        for table in names.values():
            connection.execute(f"VACUUM ANALYZE {table}")
    figures["vacuum_analyze_seconds"] = round(time.perf_counter() - started, 3)
    figures["rows_per_second"] = round(2 * size / figures["seconds"])
    return figures


def check_load(size: int) -> int:
    """Sampled rows equal what resource_list.py's loader would have written for them."""
    from sources.models import Change, Resource

    picks = sorted({0, size - 1, *range(999, size, max(1, size // SAMPLES))})
    for n in picks:
        wanted = rl.make_event(n)
        row = Resource.objects.get(pk=n + 1)
        change = Change.objects.get(resource_key=n + 1)
        for stored in (row, change):
            got = (stored.uri, stored.location_value, stored.length, stored.md5, stored.mime)
            want = (wanted.uri, wanted.uri, wanted.length, wanted.md5, wanted.mime)
            check(got == want, f"resource {n}: {got} loaded, {want} expected")
            check(stored.lastmod == wanted.lastmod, f"resource {n}: lastmod {stored.lastmod}")
            check(stored.ln == [link.as_json() for link in wanted.links], f"resource {n}: ln")
    count = Resource.objects.count()
    check(count == size == Change.objects.count(), f"{count} resources loaded, not {size}")
    return len(picks)


# Disk


def disk(work: Path) -> dict[str, Any]:
    """The tables with their indexes, the whole database, the documents' folders."""
    from django.db import connection

    figures: dict[str, Any] = {}
    with connection.cursor() as cursor:
        for kind, table in tables().items():
            cursor.execute(
                "SELECT pg_total_relation_size(%s), pg_relation_size(%s), pg_indexes_size(%s)",
                [table, table, table],
            )
            total, heap, indexes = cursor.fetchone()
            figures[kind] = {"total_bytes": total, "table_bytes": heap, "index_bytes": indexes}
        cursor.execute("SELECT pg_database_size(current_database())")
        figures["database_bytes"] = cursor.fetchone()[0]
    for name in ("documents", "published"):
        files = [path for path in (work / name).rglob("*") if path.is_file()]
        figures[name] = {"files": len(files), "bytes": sum(path.stat().st_size for path in files)}
    return figures


# Ingest over HTTP


def http_event(n: int, change: str, version: int) -> dict[str, Any]:
    """common.event for resource n, at the URI resource_list.py gives it."""
    posted = event(n, change, version)
    posted["location"]["value"] = rl.resource_uri(n)
    return posted


def post(portal: Portal, numbers: list[int], change: str, expected: rl.Expected, batch: int):
    """POST events for these resources, --batch a request; events/s until the last 200."""
    from django.utils import timezone

    versions = {n: expected.versions.get(n, 1) + 1 if change == "updated" else 1 for n in numbers}
    bodies = [
        ndjson(http_event(n, change, versions[n]) for n in numbers[start : start + batch])
        for start in range(0, len(numbers), batch)
    ]
    figures: dict[str, Any] = {"events": len(numbers), "load_before": machine()["load"]}
    since, counted = timezone.now(), 0
    with portal.client() as client:
        started = time.perf_counter()
        for body in bodies:
            counted += portal.post_events(client, "bench/big", body)[change]
        figures["acknowledged_seconds"] = round(time.perf_counter() - started, 3)
    check(counted == len(numbers), f"{change}: the API counted {counted} of {len(numbers)}")
    figures["acknowledged_events_per_second"] = round(
        len(numbers) / figures["acknowledged_seconds"]
    )
    if change == "updated":
        expected.versions.update(versions)
    else:
        expected.count += len(numbers)
    figures["pages_current_seconds"] = round(
        figures["acknowledged_seconds"] + wait_for_pages(portal, since), 3
    )
    figures["load_after"] = machine()["load"]
    log(f"http {change}: {figures}")
    return figures


def wait_for_pages(portal: Portal, since, timeout: float = 1800) -> float:
    """Seconds until every page holding a change received since `since` was regenerated past it.

    A page is current when its snapshot is no older than the newest of its
    changes (their time of receipt) and it has written its greatest key.
    """
    from sitemaps.models import ResourceListPage
    from sources.models import Change

    started = time.perf_counter()
    newest: dict[int, Any] = {}  # key -> newest change time
    for key, moment in Change.objects.filter(
        resource_set__slug="big", datetime__gte=since
    ).values_list("resource_key", "datetime"):
        newest[key] = max(moment, newest.get(key, moment))
    check(newest, "no change was recorded")
    while time.perf_counter() - started < timeout:
        pages = list(ResourceListPage.objects.filter(resource_set__slug="big"))
        starts = [page.after_key for page in pages]  # in key order (the model's ordering)
        if all(
            page_current(pages[bisect_left(starts, key) - 1], key, at) for key, at in newest.items()
        ):
            return time.perf_counter() - started
        portal.check_worker()
        time.sleep(0.5)
    raise rl.BenchFailure(f"the pages were not regenerated within {timeout:.0f} s")


def page_current(page, key: int, moment) -> bool:
    """Whether `page` (its range holds `key`) wrote it from a snapshot taken after `moment`."""
    return (page.last_key or 0) >= key and page.at is not None and page.at >= moment


def spread(size: int, count: int) -> list[int]:
    """`count` resources evenly over the set (every page), none of them already changed."""
    stride = max(2, size // count)
    return [n for n in range(1, size, stride)][:count]


def http_ingest(args: argparse.Namespace, work: Path, expected: rl.Expected) -> dict[str, Any]:
    from django.db import connections

    connections.close_all()
    portal = Portal(
        "large_set", elasticsearch="", redis=args.redis, keep=args.keep, generator="database"
    )
    portal.env["DATABASE_URL"] = os.environ["DATABASE_URL"]
    portal.env["DATA_DIR"] = str(work)
    results: dict[str, Any] = {"batch": args.batch}
    with portal:
        portal.token = portal.manage("create_api_token", PROVIDER, "--name", "bench")
        first = expected.count
        created = list(range(first, first + args.http_events))
        results["create"] = post(portal, created, "created", expected, args.batch)
        updated = spread(first, args.http_events)
        results["update"] = post(portal, updated, "updated", expected, args.batch)
        portal.wait_until_settled("bench/big", 0, quiet=10)
        results["peak_rss_mib"] = portal.peak_rss_mib()
    return results


# Main


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    resource_set = rl.make_set(False)
    results: dict[str, Any] = {
        "benchmark": "large_set",
        "size": args.size,
        "database_engine": "postgres",
        "generator": "database",
        "entries_per_document": rl.ENTRIES_PER_DOCUMENT,
        "started": now_iso(),
        "machine": machine(),
        "work": str(work),
    }
    results["load"] = load(os.environ["DATABASE_URL"], resource_set.pk, args.size)
    results["load"]["rows_checked"] = check_load(args.size)
    log(f"load: {results['load']}")
    results["disk_after_load"] = disk(work)
    expected = rl.Expected(args.size)
    rl.use_generator(rl.DATABASE)
    read = sampled_pages(args.size)
    results["initial"] = rl.timed_regeneration(resource_set, expected, read)
    results["initial"]["pages_read"] = read
    rl.say("initial", results["initial"])
    results["full"] = []
    for _ in range(args.repeat):
        results["full"].append(rl.timed_regeneration(resource_set, expected, []))
        written = results["full"][-1]["pages_written"]
        check(written == results["initial"]["pages"], f"a full run rewrote {written} pages")
        rl.say("full", results["full"][-1])
    changes = (("update", "updated", args.size // 2), ("delete", "deleted", args.size // 4))
    for phase, change, n in (*changes, ("create", "created", args.size)):
        results[phase] = rl.timed_change(phase, resource_set, args, expected, change, n)
    results["disk"] = disk(work)
    if args.http_events:
        results["http"] = http_ingest(args, work, expected)
        results["http"]["check"] = rl.in_child(
            rl.check_documents, resource_set, expected, False, sampled_pages(expected.count)
        )
        results["disk_after_http"] = disk(work)
    results["load_after"] = machine()["load"]
    results["rows"] = rows(results)
    return results


def sampled_pages(size: int) -> list[int]:
    """Every tenth page and the last: the pages a check reads (the others by range and count)."""
    pages = -(-size // rl.ENTRIES_PER_DOCUMENT)
    return sorted({*range(1, pages + 1, 10), pages})


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The table's lines: figures without goals of their own (the goals are for 1,000,000)."""
    size, load = f"{results['size']:,}", results["load"]
    full = results["full"][-1]
    memory = max(full["peak_memory_mib"]["total_pss"], full["peak_memory_mib"]["largest_rss"])
    lines = [
        row("L", f"Load {size} resources and their changes (SQL, not the API)", "—",
            f"{load['seconds']:.0f} s, then VACUUM ANALYZE {load['vacuum_analyze_seconds']:.0f} s"),
        row("L", f"Full Resource List from database, {size} entries", "—",
            f"{full['seconds']:.1f} s ({full['cpu_seconds']:.1f} CPU-s, {full['pages']} pages),"
            f" peak {memory:.0f} MiB",
            baseline=f"initial {results['initial']['seconds']:.1f} s"),
    ]  # fmt: skip
    for phase in ("update", "delete", "create"):
        change = results[phase]
        lines.append(
            row("L", f"One {phase} in the {size} set, then a regeneration", "—",
                f"{change['seconds']:.2f} s ({change['cpu_seconds']:.2f} CPU-s), pages"
                f" {change['pages_written']} + {', '.join(change['indexes_written'])}",
                baseline=f"full {full['seconds']:.1f} s", ratio=change["seconds"] / full["seconds"])
        )  # fmt: skip
    for phase, figures in results.get("http", {}).items():
        if isinstance(figures, dict) and "events" in figures:
            lines.append(
                row("L", f"HTTP {phase}s into the {size} set, committed (200)", "—",
                    f"{figures['acknowledged_events_per_second']:,} events/s"
                    f" ({figures['events']:,}); pages current after"
                    f" {figures['pages_current_seconds']:.1f} s")
            )  # fmt: skip
    stored = results["disk"]
    tables = sum(stored[kind]["total_bytes"] for kind in ("resources", "changes"))
    lines.append(
        row("L", f"Disk, {size} resources", "—",
            f"tables and indexes {tables / 2**30:.2f} GiB, documents"
            f" {stored['documents']['bytes'] / 2**30:.2f} GiB")
    )  # fmt: skip
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=10_000_000, help="resources (10,000,000)")
    parser.add_argument("--repeat", type=int, default=1, help="full regenerations (1)")
    parser.add_argument("--http-events", type=int, default=100_000, help="creates, then updates")
    parser.add_argument("--batch", type=int, default=10_000, help="events per request (10,000)")
    parser.add_argument("--postgres", metavar="URL", required=True, help="a PostgreSQL server")
    parser.add_argument("--redis", default="redis://127.0.0.1:6399/1", help="Celery broker")
    parser.add_argument("--output", type=Path, help="results JSON (bench/results/...)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder and database")
    args = parser.parse_args(argv)
    if args.size < 100_000 or args.http_events * 2 > args.size:
        parser.error("--size must be at least 100,000 and twice --http-events")
    # What resource_list.py's phases read from its own options.
    args.elasticsearch, args.index_prefix, args.change_lists = None, "", False
    args.only_written_pages = True
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = rl.WORK / f"large_set-{datetime.now():%Y-%m-%dT%H%M%S}-{os.getpid()}"
    work.mkdir(parents=True)
    try:
        with rl.database_url(work, args.postgres, "large_set", keep=args.keep) as database:
            # The portal's documents link to its own address: so must this process's.
            os.environ["PUBLIC_BASE_URL"] = f"http://127.0.0.1:{PORTAL_PORT}"
            rl.configure(work, args, database)
            results = run(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    finish(results, args.output, "large_set")
    for line in summary(results):
        print(line)
    return 0


def summary(results: dict[str, Any]) -> list[str]:
    size, load = results["size"], results["load"]
    lines = [
        f"{size:,} resources on PostgreSQL, database generator:",
        f"  load (SQL) {load['seconds']:.0f} s,"
        f" then VACUUM ANALYZE {load['vacuum_analyze_seconds']:.0f} s",
    ]
    named = [("initial", results["initial"])] + [("full", run) for run in results["full"]]
    for name, run in named:
        memory = run["peak_memory_mib"]
        lines.append(
            f"  {name}: {run['seconds']:.1f} s ({run['cpu_seconds']:.1f} CPU-s),"
            f" {run['pages']} pages,"
            f" peak {max(memory['total_pss'], memory['largest_rss']):.0f} MiB,"
            f" load {run['load_before'][0]:.1f}"
        )
    for phase in ("update", "delete", "create"):
        change = results[phase]
        lines.append(
            f"  {phase}: {change['seconds']:.2f} s, pages {change['pages_written']}"
            f" + {', '.join(change['indexes_written'])}"
        )
    stored = results["disk"]
    for kind in ("resources", "changes"):
        figures = stored[kind]
        lines.append(
            f"  {kind}: {figures['total_bytes'] / 2**30:.2f} GiB"
            f" (indexes {figures['index_bytes'] / 2**30:.2f} GiB)"
        )
    lines.append(f"  documents: {stored['documents']['bytes'] / 2**30:.2f} GiB")
    for phase, figures in results.get("http", {}).items():
        if isinstance(figures, dict) and "events" in figures:
            lines.append(
                f"  HTTP {phase}s: {figures['acknowledged_events_per_second']:,} events/s,"
                f" pages current after {figures['pages_current_seconds']:.1f} s"
            )
    return lines


if __name__ == "__main__":
    sys.exit(main())
