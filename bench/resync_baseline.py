"""The baseline for item 1: the `resync` library writing the same entries as a list index.

    .venv/bin/python bench/resync_baseline.py [--size 1000000] [--output FILE] [--keep]

resync (the reference ResourceSync implementation) builds a `ResourceList`
in memory and `write(basename=...)` splits it into sitemaps of
`max_sitemap_entries` (50,000) under a Resource List Index. The entries are
the ones bench/resource_list.py loads into the portal (its `make_event`):
same URIs, lastmods, lengths, hashes, types and describedby links.

Timed separately: building the list (one `Resource` per entry, added to the
`ResourceList`) and writing it; the baseline for the portal's full Resource
List is the write, the part that does the same job (the portal's figure
reads its entries from a store as well, so comparing with the write alone is
the harder test). Peak RSS is the process's, since resync holds every entry.
The written files are then checked: the index names every part, each part
is a urlset of at most 50,000 entries, and together they list every URI once,
in order.
"""

from __future__ import annotations

import argparse
import math
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from lxml import etree

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]

from common import SM, WORK, check, finish, log, machine, now_iso, row  # noqa: E402
from resource_list import make_event, resource_uri  # noqa: E402
from resync import Resource, ResourceList  # noqa: E402
from resync.mapper import Mapper  # noqa: E402

ENTRIES_PER_SITEMAP = 50_000
BASE_URI = "http://data.example.org/bench/resync/"


def build(size: int) -> ResourceList:
    resources = ResourceList()
    for n in range(size):
        event = make_event(n)
        resources.add(
            Resource(
                uri=event.uri,
                timestamp=event.lastmod.timestamp(),
                length=event.length,
                md5=event.md5,
                mime_type=event.mime,
                ln=[{"rel": link.rel, "href": link.uri, "type": link.mime} for link in event.links],
            )
        )
    return resources


def check_written(directory: Path, size: int) -> dict[str, Any]:
    """Every part named by the index, every URI once and in order."""
    index_path = directory / "resourcelist.xml"
    root = etree.parse(str(index_path)).getroot()
    parts = math.ceil(size / ENTRIES_PER_SITEMAP)
    if parts == 1:
        files = [index_path]
    else:
        check(root.tag == f"{SM}sitemapindex", f"resync wrote a {root.tag}, not an index")
        locs = [loc.text for loc in root.iter(f"{SM}loc")]
        check(len(locs) == parts, f"the index names {len(locs)} parts, expected {parts}")
        files = [directory / loc.removeprefix(BASE_URI) for loc in locs]
    n = 0
    for path in files:
        on_part = 0
        for _, element in etree.iterparse(str(path), tag=f"{SM}url"):
            loc = element.findtext(f"{SM}loc")
            check(
                loc == resource_uri(n), f"{path.name}: {loc} where {resource_uri(n)} was expected"
            )
            element.clear()
            n += 1
            on_part += 1
        check(on_part <= ENTRIES_PER_SITEMAP, f"{path.name} holds {on_part} entries")
    check(n == size, f"resync wrote {n} entries, expected {size}")
    total = sum(path.stat().st_size for path in directory.iterdir())
    return {"parts": len(files), "entries": n, "bytes": total}


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "benchmark": "resync_baseline",
        "size": args.size,
        "max_sitemap_entries": ENTRIES_PER_SITEMAP,
        "started": now_iso(),
        "machine": machine(),
    }
    directory = WORK / f"resync-{time.strftime('%Y%m%dT%H%M%S')}"
    directory.mkdir(parents=True)
    try:
        started = time.perf_counter()
        resources = build(args.size)
        built = time.perf_counter()
        resources.max_sitemap_entries = ENTRIES_PER_SITEMAP
        resources.mapper = Mapper([f"{BASE_URI}={directory}"])
        resources.write(basename=str(directory / "resourcelist.xml"))
        written = time.perf_counter()
        results["build_seconds"] = round(built - started, 3)
        results["write_seconds"] = round(written - built, 3)
        results["seconds"] = results["write_seconds"]
        results["entries_per_second"] = round(args.size / (written - built))
        results["peak_rss_mib"] = round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
        )
        results["load_after"] = machine()["load"]
        results.update(check_written(directory, args.size))
        log(f"resync: built in {results['build_seconds']} s, wrote in {results['write_seconds']} s")
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    results["rows"] = [
        row(
            "1",
            f"Baseline: resync ResourceList.write, {args.size:,} entries",
            "—",
            f"{results['write_seconds']:.2f} s ({results['entries_per_second']:,}/s; "
            f"build {results['build_seconds']:.2f} s), peak RSS {results['peak_rss_mib']:.0f} MiB",
        )
    ]
    return results


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="entries (1,000,000)")
    parser.add_argument("--output", type=Path, help="results JSON (bench/results/...)")
    parser.add_argument("--keep", action="store_true", help="keep the written files")
    args = parser.parse_args(argv)
    if args.size < 1:
        parser.error("--size must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    finish(run(args), args.output, "resync_baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
