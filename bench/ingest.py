"""Bulk ingestion through the real HTTP API, into the database and Elasticsearch.

    .venv/bin/python bench/ingest.py [--size 1000000] [--batch 10000]
        [--elasticsearch URL] [--redis URL] [--output FILE] [--keep]

The portal runs as deployed (gunicorn, a Celery worker that indexes and
regenerates, Elasticsearch, Redis: see common.Portal). One client posts
--size `created` events as NDJSON, --batch per request, then one `updated`
event for each resource. Each phase gives two rates, because the API's
promise is the commit and the mirror follows after it:

- acknowledged: events / time until the last 200 (committed to the database);
- in Elasticsearch: events / time until the mirror holds every change
  (polled counts), so the Elasticsearch generator can publish them.

The baseline, in the same run: the same events sent straight to
Elasticsearch's `_bulk` API into a scratch index, the floor of what the
mirror costs on this machine right now.

Before a figure is kept, every response must count its events as created or
updated, the index counts must match, and sample resources read back through
the API and from Elasticsearch must carry the last posted hash.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
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
    process_tree,
    resource_md5,
    resource_uri,
    row,
)

GOAL_EVENTS_PER_SECOND = 5_000
#: Until Elasticsearch holds every change: at least this share of `_bulk` alone.
GOAL_BULK_RATIO = 0.8
BASELINE_BULK_DOCUMENTS = 5_000
SAMPLES = 20


def spool(path: Path, size: int, batch: int, change: str, version: int) -> list[tuple[int, int]]:
    """Write the phase's request bodies to a file first, so the timed loop only sends."""
    spans = []
    with path.open("wb") as out:
        for start in range(0, size, batch):
            body = ndjson(event(n, change, version) for n in range(start, min(start + batch, size)))
            spans.append((out.tell(), len(body)))
            out.write(body)
    return spans


def bodies(path: Path, spans: list[tuple[int, int]]):
    with path.open("rb") as source:
        for offset, length in spans:
            source.seek(offset)
            yield source.read(length)


def cpu_seconds(portal: Portal) -> dict[str, float]:
    """CPU time so far of gunicorn's and Celery's processes (with their reaped children)."""
    ticks = os.sysconf("SC_CLK_TCK")
    used = {}
    for name, process in portal.processes.items():
        total = 0
        for pid in process_tree(process.pid):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except FileNotFoundError:  # a page builder that just ended
                continue
            total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
        used[name] = total / ticks
    return used


def post_phase(
    portal: Portal, set_path: str, path: Path, spans, *, change: str, size: int, total_changes: int
) -> dict[str, Any]:
    """Post every body, then wait until Elasticsearch holds every change of the set."""
    figures: dict[str, Any] = {
        "events": size,
        "requests": len(spans),
        "load_before": machine()["load"],
    }
    counted = {"created": 0, "updated": 0}
    request_seconds = []
    cpu_before = cpu_seconds(portal)
    with portal.client() as client:
        started = time.perf_counter()
        for body in bodies(path, spans):
            sent = time.perf_counter()
            counts = portal.post_events(client, set_path, body)
            request_seconds.append(time.perf_counter() - sent)
            for name in counted:
                counted[name] += counts[name]
        acknowledged = time.perf_counter() - started
    cpu_acknowledged = cpu_seconds(portal)
    check(counted[change] == size, f"{change}: the API counted {counted}, expected {size}")
    while (indexed := portal.es_count("changes", set_path)) < total_changes:
        check(time.perf_counter() - started < 3600, f"only {indexed} changes indexed after 1 h")
        portal.check_worker()
        time.sleep(0.1)
    in_elasticsearch = time.perf_counter() - started
    cpu_mirrored = cpu_seconds(portal)
    check(indexed == total_changes, f"{indexed} changes in Elasticsearch, {total_changes} posted")
    resources = portal.es_count("resources", set_path)
    check(resources == size, f"{resources} resources in Elasticsearch, expected {size}")
    figures.update(
        acknowledged_seconds=round(acknowledged, 3),
        acknowledged_events_per_second=round(size / acknowledged),
        elasticsearch_seconds=round(in_elasticsearch, 3),
        elasticsearch_events_per_second=round(size / in_elasticsearch),
        request_seconds_median=round(statistics.median(request_seconds), 3),
        request_seconds_max=round(max(request_seconds), 3),
        load_after=machine()["load"],
        # CPU seconds, the measure that holds on a shared machine: until the last 200,
        # and until Elasticsearch held every change.
        acknowledged_cpu_seconds={
            name: round(cpu_acknowledged[name] - cpu_before[name], 2) for name in cpu_before
        },
        elasticsearch_cpu_seconds={
            name: round(cpu_mirrored[name] - cpu_before[name], 2) for name in cpu_before
        },
    )
    return figures


def check_samples(portal: Portal, set_path: str, size: int, version: int) -> int:
    """Sample resources, read back from the database (API) and Elasticsearch."""
    picks = {0, size - 1, *random.Random(size).sample(range(size), min(SAMPLES, size))}
    with portal.client(headers={"Authorization": f"Token {portal.token}"}) as client:
        for n in sorted(picks):
            expected = resource_md5(n, version)
            response = client.get(
                f"/api/v1/sets/{set_path}/resources", params={"location": resource_uri(n)}
            )
            check(response.status_code == 200, f"resource {n}: {response.status_code}")
            check(response.json()["md5"] == expected, f"resource {n} in the database: not updated")
            mirrored = portal.es_resource(set_path, resource_uri(n))
            check(mirrored and mirrored["md5"] == expected, f"resource {n} in Elasticsearch: stale")
    return len(picks)


def bulk_baseline(elasticsearch: str, path: Path, spans, size: int) -> dict[str, Any]:
    """The created events straight into two scratch indices with `_bulk`.

    The mirror writes two documents per event (the resource and the change),
    so the baseline writes each event twice too, in batches of the same order.
    """
    indices = ("bench-ingest-baseline-resources", "bench-ingest-baseline-changes")
    es = httpx.Client(base_url=elasticsearch, timeout=600)
    for index in indices:
        es.delete(f"/{index}")
        es.put(f"/{index}", json={"settings": {"number_of_replicas": 0}}).raise_for_status()
    actions = [json.dumps({"index": {"_index": index}}).encode() + b"\n" for index in indices]
    try:
        started = time.perf_counter()
        batch: list[bytes] = []
        for body in bodies(path, spans):
            for line in body.splitlines(keepends=True):
                batch.extend(action + line for action in actions)
                if len(batch) >= BASELINE_BULK_DOCUMENTS:
                    _bulk(es, batch)
                    batch = []
        if batch:
            _bulk(es, batch)
        es.post(f"/{','.join(indices)}/_refresh").raise_for_status()
        seconds = time.perf_counter() - started
        count = es.get(f"/{','.join(indices)}/_count").json()["count"]
        check(count == 2 * size, f"baseline: {count} documents indexed, expected {2 * size}")
    finally:
        es.delete(f"/{','.join(indices)}")
        es.close()
    return {"seconds": round(seconds, 3), "events_per_second": round(size / seconds)}


def _bulk(es: httpx.Client, lines: list[bytes]) -> None:
    response = es.post(
        "/_bulk", content=b"".join(lines), headers={"Content-Type": "application/x-ndjson"}
    )
    response.raise_for_status()
    check(not response.json()["errors"], "baseline: Elasticsearch refused a document")


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "benchmark": "ingest",
        "size": args.size,
        "batch": args.batch,
        "started": now_iso(),
        "machine": machine(),
    }
    results["database_engine"] = database_name(args.postgres)
    with Portal(
        "ingest",
        elasticsearch=args.elasticsearch,
        redis=args.redis,
        keep=args.keep,
        postgres=args.postgres,
    ) as portal:
        set_path = portal.create_set("ingest")
        spools = {}
        for phase, change, version in (("create", "created", 1), ("update", "updated", 2)):
            path = portal.work / f"{phase}.ndjson"
            spools[phase] = (path, spool(path, args.size, args.batch, change, version))
        results["baseline_bulk"] = bulk_baseline(args.elasticsearch, *spools["create"], args.size)
        log(f"baseline: {results['baseline_bulk']}")
        started = time.perf_counter()
        results["create"] = post_phase(
            portal, set_path, *spools["create"], change="created", size=args.size,
            total_changes=args.size,
        )  # fmt: skip
        log(f"create: {results['create']}")
        # The documents are rebuilt by the worker as events land: wait for them
        # so the update phase does not share the machine with that backlog.
        portal.wait_for_resource_list(set_path, args.size)
        results["create"]["resource_list_complete_seconds"] = round(
            time.perf_counter() - started, 3
        )
        portal.wait_until_settled(set_path, args.size)
        results["update"] = post_phase(
            portal, set_path, *spools["update"], change="updated", size=args.size,
            total_changes=2 * args.size,
        )  # fmt: skip
        log(f"update: {results['update']}")
        results["samples_checked"] = check_samples(portal, set_path, args.size, version=2)
        results["peak_rss_mib"] = portal.peak_rss_mib()
    results["rows"] = rows(results)
    return results


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    baseline = results["baseline_bulk"]["events_per_second"]
    lines = []
    for phase in ("create", "update"):
        figures = results[phase]
        events = f"{figures['events']:,}"
        for kind, label in (
            ("acknowledged", "committed (200)"),
            ("elasticsearch", "in Elasticsearch"),
        ):
            rate = figures[f"{kind}_events_per_second"]
            mirrored = kind == "elasticsearch"
            goal = f"≥ {GOAL_EVENTS_PER_SECOND:,} events/s"
            lines.append(
                row(
                    "3",
                    f"Ingestion via HTTP, {phase}s, {label}",
                    goal + (f" and ≥ {GOAL_BULK_RATIO:g}x _bulk" if mirrored else ""),
                    f"{rate:,} events/s ({events} in {figures[f'{kind}_seconds']:.1f} s)",
                    baseline=f"ES _bulk {baseline:,} events/s" if mirrored else "",
                    ratio=rate / baseline if mirrored else None,
                    met=rate >= GOAL_EVENTS_PER_SECOND
                    and (not mirrored or rate >= GOAL_BULK_RATIO * baseline),
                )
            )
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="resources (1,000,000)")
    parser.add_argument("--batch", type=int, default=10_000, help="events per request (10,000)")
    add_portal_arguments(parser)
    args = parser.parse_args(argv)
    if args.size < 1 or args.batch < 1:
        parser.error("--size and --batch must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    finish(run(args), args.output, "ingest")
    return 0


if __name__ == "__main__":
    sys.exit(main())
