"""Freshness: the time from a posted change to its appearance in the open Change List.

    .venv/bin/python bench/freshness.py [--size 75000] [--samples 10]
        [--elasticsearch URL] [--redis URL] [--output FILE] [--keep]

The portal runs as deployed (gunicorn, a Celery worker that indexes into
Elasticsearch and regenerates, Redis: see common.Portal), so the path timed is
the production one: commit, after-commit indexing task, regeneration task
`regenerate_after_seconds` (1 s by default) later, documents read by a client.

The set gets --size resources through the API first (not timed: with the
default 75,000 the first Resource List page is full and the open Change List
holds 25,000 entries, so each regeneration rewrites real-sized documents).
Then, --samples times, one event is posted, alternately an update of a
resource on the first page and the creation of a new resource, and a
destination-like poller reads changelist.xml and the open Change List it names
(conditional GETs every 100 ms, light enough not to slow the
portal it measures) until the entry shows with its change type and
hash. The figure is the time from sending the POST to seeing the entry; the
baseline is `regenerate_after_seconds`, which used to be the floor: a lone
change now starts a run at once (at most one run per that period).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    ENTRIES_PER_PAGE,
    RS,
    SM,
    BenchFailure,
    Portal,
    add_portal_arguments,
    check,
    database_name,
    event,
    finish,
    log,
    machine,
    ndjson,
    now_iso,
    parse_document,
    resource_md5,
    resource_uri,
    row,
)

GOAL_MEDIAN_SECONDS = 1.0
GOAL_MAX_SECONDS = 2.0
FLOOR_SECONDS = 1.0  # CapabilitySettings.regenerate_after_seconds, default
POLL_SECONDS = 0.1
TIMEOUT_SECONDS = 120


class Poller:
    """Reads documents as a destination does: conditional GETs, parsing only what changed."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.cache: dict[str, tuple[str, Any]] = {}

    def get(self, path: str):
        cached = self.cache.get(path)
        headers = {"If-None-Match": cached[0]} if cached else {}
        response = self.client.get(path, headers=headers)
        if response.status_code == 304 and cached:
            return cached[1]
        check(response.status_code == 200, f"{path} answered {response.status_code}")
        root = parse_document(response.content, path)
        self.cache[path] = (response.headers.get("etag", ""), root)
        return root

    def open_change_list(self, set_path: str, base_url: str) -> str:
        """The path of the open Change List: the one whose rs:md has no `until`.

        Until a second list opens, `changelist.xml` is the set's one Change
        List itself (a urlset), not an index.
        """
        path = f"/resourcesync/{set_path}/changelist.xml"
        index = self.get(path)
        if index.tag == f"{SM}urlset":
            return path
        check(index.tag == f"{SM}sitemapindex", f"changelist.xml is a {index.tag}")
        for sitemap in index.iter(f"{SM}sitemap"):
            if sitemap.find(f"{RS}md").get("until") is None:
                return sitemap.findtext(f"{SM}loc").removeprefix(base_url)
        raise BenchFailure("the Change List Index names no open Change List")

    def lists(self, path: str, uri: str, change: str, hash_: str) -> bool:
        for url in self.get(path).iter(f"{SM}url"):
            if url.findtext(f"{SM}loc") == uri:
                md = url.find(f"{RS}md")
                if md.get("change") == change and md.get("hash") == hash_:
                    return True
        return False


def sample(portal: Portal, poller: Poller, set_path: str, number: int, size: int) -> dict[str, Any]:
    """Post one event, then poll until the open Change List shows it."""
    version = number + 2
    if number % 2 == 0:
        n, change = random.Random(number).randrange(min(size, ENTRIES_PER_PAGE)), "updated"
    else:
        n, change = size + number, "created"
    body = ndjson([event(n, change, version, tag=f"fresh{number}-")])
    wanted = f"md5:{resource_md5(n, version)}"
    with portal.client() as client:
        started = time.perf_counter()
        counts = portal.post_events(client, set_path, body)
        acknowledged = time.perf_counter() - started
    check(counts[change] == 1, f"sample {number}: the API counted {counts}")
    for poll in range(int(TIMEOUT_SECONDS / POLL_SECONDS)):
        if poll % 10 == 0:  # the open list moves on only when one closes
            path = poller.open_change_list(set_path, portal.base_url)
            portal.check_worker()
        if poller.lists(path, resource_uri(n), change, wanted):
            visible = time.perf_counter() - started
            break
        time.sleep(POLL_SECONDS)
    else:
        raise BenchFailure(f"sample {number}: not listed after {TIMEOUT_SECONDS} s")
    return {
        "change": change,
        "resource": n,
        "acknowledged_seconds": round(acknowledged, 3),
        "visible_seconds": round(visible, 3),
        "open_change_list": path,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "benchmark": "freshness",
        "size": args.size,
        "started": now_iso(),
        "machine": machine(),
    }
    results["database_engine"] = database_name(args.postgres)
    results["generator"] = args.generator
    with Portal(
        "freshness",
        elasticsearch=args.elasticsearch,
        redis=args.redis,
        keep=args.keep,
        postgres=args.postgres,
        generator=args.generator,
    ) as portal:
        set_path = portal.create_set("fresh")
        portal.load(set_path, args.size)
        portal.wait_for_resource_list(set_path, args.size)
        portal.wait_until_settled(set_path, args.size)
        samples = []
        with portal.client() as client:
            poller = Poller(client)
            for number in range(args.samples):
                samples.append(sample(portal, poller, set_path, number, args.size))
                log(f"sample {number + 1}: {samples[-1]}")
                time.sleep(0.5)
        results["samples"] = samples
        results["peak_rss_mib"] = portal.peak_rss_mib()
    visible = [item["visible_seconds"] for item in samples]
    results["visible_seconds"] = {
        "median": round(statistics.median(visible), 3),
        "max": round(max(visible), 3),
        "min": round(min(visible), 3),
    }
    results["rows"] = rows(results)
    return results


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    seconds = results["visible_seconds"]
    count = len(results["samples"])
    return [
        row(
            "5",
            f"Freshness: posted change to open Change List ({results['size']:,}-resource set,"
            f" {results.get('generator', 'elasticsearch')} generator)",
            f"median ≤ {GOAL_MEDIAN_SECONDS:g} s, max ≤ {GOAL_MAX_SECONDS:g} s",
            f"median {seconds['median']:.2f} s, max {seconds['max']:.2f} s ({count} changes)",
            baseline=f"regenerate_after_seconds {FLOOR_SECONDS:g} s",
            ratio=seconds["median"] / FLOOR_SECONDS,
            met=seconds["median"] <= GOAL_MEDIAN_SECONDS and seconds["max"] <= GOAL_MAX_SECONDS,
        )
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=75_000, help="resources loaded first (75,000)")
    parser.add_argument("--samples", type=int, default=10, help="changes posted and timed (10)")
    parser.add_argument(
        "--generator", choices=("elasticsearch", "database"), default="elasticsearch",
        help="what the portal builds documents from (elasticsearch)",
    )  # fmt: skip
    add_portal_arguments(parser)
    args = parser.parse_args(argv)
    if args.size < 1 or args.samples < 1:
        parser.error("--size and --samples must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    finish(run(args), args.output, "freshness")
    return 0


if __name__ == "__main__":
    sys.exit(main())
