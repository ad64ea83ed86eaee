"""Item 7: `manage.py scan` of a folder of N files, beside resync's own listing of it.

    .venv/bin/python bench/scan.py [--size 100000] [--changed 100] [--output FILE] [--keep]

A fresh SQLite database and a folder of N small files (1,000 per
sub-folder) live under bench/work/ (git-ignored). Timed, in this order:

- first scan: every file is new, so every file is read for md5 and SHA-256
  and N `created` events go through the ingestion service;
- rescan with nothing changed: size and mtime only (checked: no file read);
- rescan after `--changed` files were rewritten: only those are read and
  recorded as `updated` (goal: at most 10 % of the first scan);
- baseline: resync's `ResourceListBuilder.from_disk` over the same folder,
  with md5 (what its Resource List needs) and without any hash.

Regeneration is switched off (the scan is what is timed; items 1 and 2 time
the documents). Every figure is checked before it is kept: the counts of
created, updated, unchanged and files read must be exactly as expected.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]

from common import (  # noqa: E402
    REPO,
    RESULTS,
    WORK,
    add_database_argument,
    check,
    database_name,
    database_url,
    finish,
    log,
    machine,
    now_iso,
    remove_work,
    row,
)

URL_PREFIX = "http://data.example.org/bench/scan/"
PER_FOLDER = 1000
GOAL_RATIO = 0.10


def configure(work: Path, database: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "resourcesync_portal.settings"
    os.environ["DATA_DIR"] = str(work)
    os.environ["DATABASE_URL"] = database
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    for name in ("CELERY_BROKER_URL", "RESOURCESYNC_STORAGE_BACKEND", "ELASTICSEARCH_URL"):
        os.environ.pop(name, None)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import django

    django.setup()
    import sitemaps.tasks

    sitemaps.tasks.schedule = lambda *args, **kwargs: None  # no regeneration: the scan is timed


def content(n: int, version: int) -> bytes:
    return f"file {n} version {version}\n".encode() * (1 + n % 20)


def make_files(root: Path, size: int) -> None:
    for n in range(size):
        folder = root / f"d{n // PER_FOLDER:04d}"
        if n % PER_FOLDER == 0:
            folder.mkdir(parents=True)
        (folder / f"f{n:07d}.txt").write_bytes(content(n, 1))


def change_files(root: Path, size: int, changed: int) -> None:
    step = max(1, size // changed)
    for n in list(range(0, size, step))[:changed]:
        path = root / f"d{n // PER_FOLDER:04d}" / f"f{n:07d}.txt"
        path.write_bytes(content(n, 2))
        status = path.stat()
        os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 2_000_000_000))


def make_set(root: Path):
    from sources.models import CapabilitySettings, DataProvider, ResourceSet

    provider = DataProvider.objects.create(slug="bench", name="bench")
    resource_set = ResourceSet.objects.create(
        provider=provider, slug="scan", name="scan", url_prefix=URL_PREFIX,
        resource_root_dir=str(root),
    )  # fmt: skip
    CapabilitySettings.objects.create(resource_set=resource_set)
    return resource_set


def timed_scan(resource_set, expect: dict[str, int]) -> dict[str, Any]:
    from sources.scanning import scan_folder

    started = time.perf_counter()
    report = scan_folder(resource_set=resource_set)
    seconds = time.perf_counter() - started
    found = {name: getattr(report, name) for name in expect}
    check(found == expect, f"scan found {found}, expected {expect}")
    check(not report.skipped, f"scan skipped {report.skipped[:5]}")
    return {"seconds": round(seconds, 3), **found, "bytes_hashed": report.bytes_hashed}


def resync_listing(root: Path, size: int, hashes: set[str] | None) -> dict[str, Any]:
    from resync.mapper import Mapper
    from resync.resource_list_builder import ResourceListBuilder

    builder = ResourceListBuilder(mapper=Mapper([f"{URL_PREFIX}={root}"]), set_hashes=hashes)
    started = time.perf_counter()
    listing = builder.from_disk()
    seconds = time.perf_counter() - started
    check(len(listing) == size, f"resync listed {len(listing)} files, expected {size}")
    return {"seconds": round(seconds, 3), "entries": len(listing)}


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    root = work / "files"
    started = time.perf_counter()
    make_files(root, args.size)
    log(f"wrote {args.size:,} files in {time.perf_counter() - started:.1f} s")
    resource_set = make_set(root)
    results: dict[str, Any] = {"benchmark": "scan", "size": args.size, "changed": args.changed}
    results["database_engine"] = database_name(args.postgres)
    results["started"], results["machine"] = now_iso(), machine()
    none = {"created": 0, "updated": 0, "deleted": 0}
    results["first"] = timed_scan(
        resource_set, {**none, "created": args.size, "unchanged": 0, "hashed": args.size}
    )
    log(f"first scan: {results['first']}")
    results["unchanged"] = timed_scan(resource_set, {**none, "unchanged": args.size, "hashed": 0})
    log(f"rescan, nothing changed: {results['unchanged']}")
    change_files(root, args.size, args.changed)
    results["rescan"] = timed_scan(
        resource_set,
        {**none, "updated": args.changed, "unchanged": args.size - args.changed,
         "hashed": args.changed},
    )  # fmt: skip
    log(f"rescan, {args.changed} changed: {results['rescan']}")
    results["resync_md5"] = resync_listing(root, args.size, {"md5"})
    results["resync_no_hash"] = resync_listing(root, args.size, None)
    log(f"resync: {results['resync_md5']} with md5, {results['resync_no_hash']} without")
    results["load_after"] = machine()["load"]
    results["rows"] = rows(results)
    return results


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    size, changed = results["size"], results["changed"]
    first, rescan = results["first"]["seconds"], results["rescan"]["seconds"]
    unchanged = results["unchanged"]["seconds"]
    resync_md5 = results["resync_md5"]["seconds"]
    resync_plain = results["resync_no_hash"]["seconds"]
    return [
        row(
            "7", f"Folder scan, first, {size:,} files (md5 + SHA-256, events recorded)", "—",
            f"{first:.2f} s ({size / first:,.0f} files/s)",
            baseline=f"resync ResourceListBuilder md5 {resync_md5:.2f} s", ratio=first / resync_md5,
        ),
        row(
            "7", f"Folder rescan, nothing changed, {size:,} files", "no file read",
            f"{unchanged:.2f} s, 0 files read",
            baseline=f"resync listing without hashes {resync_plain:.2f} s",
            ratio=unchanged / resync_plain, met=results["unchanged"]["hashed"] == 0,
        ),
        row(
            "7", f"Folder rescan, {changed} of {size:,} files changed",
            f"≤ {GOAL_RATIO:.0%} of the first scan",
            f"{rescan:.2f} s ({rescan / first:.1%} of the first scan)",
            baseline=f"first scan {first:.2f} s", ratio=rescan / first,
            met=rescan <= GOAL_RATIO * first,
        ),
    ]  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100_000, help="files (100,000)")
    parser.add_argument("--changed", type=int, default=100, help="files changed before the rescan")
    parser.add_argument("--output", type=Path, help="results JSON (bench/results/...)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    add_database_argument(parser)
    args = parser.parse_args(argv)
    if args.size < 10 or not 0 < args.changed <= args.size:
        parser.error("--size must be at least 10 and --changed within 1..size")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = datetime.now().strftime("%Y-%m-%dT%H%M%S")
    work = WORK / f"scan-{stamp}-{os.getpid()}"
    work.mkdir(parents=True)
    with database_url(work, args.postgres, "scan", keep=args.keep) as database:
        configure(work, database)
        try:
            results = run(args, work)
        finally:
            if not args.keep:
                remove_work(work)
    finish(results, args.output or RESULTS / f"scan-{stamp}.json", "scan")
    return 0


if __name__ == "__main__":
    sys.exit(main())
