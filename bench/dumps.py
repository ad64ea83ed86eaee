"""Time Resource Dumps: building them, one update, and a harvester baseline from them.

    .venv/bin/python bench/dumps.py [--small 100000] [--large 1000]
        [--rtt-ms 25] [--rtt-size 10000] [--postgres URL]
        [--server auto|nginx|python] [--output FILE] [--keep]

Everything lives in a fresh folder under bench/work/ (git-ignored): the
database (a SQLite file there, or with `--postgres` a fresh database on that
server, dropped after the run), the document storage, the published tree and
the files. Two sets publish a Resource List and a Resource Dump of real files
under their resource roots: `--small` files of 100 to 1,100 bytes and
`--large` files of 1 MiB, loaded through the ingestion service (one
transaction, one regeneration of the lists). Then, per set, timed in this
process:

- build: the first regeneration with the dump turned on (every package
  written from the files, each checked against its record): seconds, MB/s
  of bitstreams, peak RSS (the high-water mark, reset before the phase),
  beside the baseline of Python's zipfile storing the same files in one ZIP
  with no check, no manifest and no database;
- update: one file rewritten and its `updated` event ingested; the
  regeneration it triggers must rebuild exactly one package (goal), the
  others keep their ETags; its time is the dump step's.

Every package is checked afterwards: its manifest lists each resource once,
and a seeded sample of bitstreams equals the files.

Then the small set is served as a static site (nginx when installed, as
harvest.py does: the published tree and the files under one root, the
Capability List written there) and all its resources are harvested three
ways, each its own process: our harvester's baseline from the Resource
Dump, our harvester's baseline from the Resource List (`use_dumps: false`),
and `resync-sync --baseline`, ours with its default concurrency. Each
destination must hold exactly the files, a sample byte-identical.

With `--rtt-ms N`, the three harvests run again through toxiproxy (see
bench/latency.py: N/2 ms on each request and N/2 ms on each answer), on a
third set of `--rtt-size` small files whose documents name the proxy. Goal:
the dump baseline at least 10 times the list baseline; with an RTT it is
judged on the run through the proxy, the local figures stay beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import os
import random
import resource
import sys
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    REPO,
    BenchFailure,
    add_database_argument,
    check,
    database_name,
    database_url,
    row,
)
from harvest import (
    PYTHON,
    SourceFile,
    harvest_summary,
    harvester_env,
    run_in_work_folder,
    run_process,
    run_resync,
    static_server,
    verify,
)
from harvest import content as small_content
from latency import latency_proxy, measured_rtt_ms

LARGE_BYTES = 1024 * 1024
FILES_PER_FOLDER = 1_000
INGEST_CHUNK = 5_000
LASTMOD = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def say(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def large_content(n: int) -> bytes:
    return random.Random(n).randbytes(LARGE_BYTES)


# The sets


def write_files(root: Path, count: int, make, url_prefix: str) -> tuple[list, list[SourceFile]]:
    """Files under `root` and the `created` events that describe them."""

    events, files = [], []
    for n in range(count):
        path = f"{n // FILES_PER_FOLDER:04d}/{n:07d}.bin"
        data = make(n)
        target = root / path
        if n % FILES_PER_FOLDER == 0:
            target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
        sha256 = hashlib.sha256(data).hexdigest()
        files.append(SourceFile(path=path, length=len(data), md5=md5, sha256=sha256))
        events.append(event(url_prefix, path, data, md5, sha256))
    return events, files


def event(url_prefix: str, path: str, data: bytes, md5: str, sha256: str, change="created"):
    from sources.events import Event

    return Event(
        change=change,
        location_type="rel_path",
        location_value=path,
        uri=url_prefix + path,
        length=len(data),
        md5=md5,
        sha256=sha256,
        mime="application/octet-stream",
        lastmod=LASTMOD,
    )


def make_set(slug: str, root: Path, url_prefix: str):
    from sources.models import CapabilitySettings, DataProvider, ResourceSet

    provider, _ = DataProvider.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    resource_set = ResourceSet.objects.create(
        provider=provider, slug=slug, name=slug, url_prefix=url_prefix,
        resource_root_dir=str(root),
    )  # fmt: skip
    CapabilitySettings.objects.create(
        resource_set=resource_set, publish_change_list=False, regenerate_after_changes=1
    )
    return resource_set


def load(resource_set, events: list) -> None:
    """Ingest in one transaction; its after-commit regeneration writes the lists."""
    from django.db import transaction

    from sitemaps.regeneration import regenerate
    from sources.services import ingest_events

    with transaction.atomic():
        for start in range(0, len(events), INGEST_CHUNK):
            ingest_events(resource_set=resource_set, events=events[start : start + INGEST_CHUNK])
    regenerate(resource_set)  # whatever the hooks did, the lists are current now


# Measuring


def reset_peak_rss() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise BenchFailure("no VmHWM")


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def measured(figures: dict[str, Any]) -> Iterator[None]:
    reset_peak_rss()
    figures["load_before"] = [round(v, 2) for v in os.getloadavg()]
    cpu, started = cpu_seconds(), time.perf_counter()
    yield
    figures["seconds"] = round(time.perf_counter() - started, 3)
    figures["cpu_seconds"] = round(cpu_seconds() - cpu, 3)
    figures["peak_rss_mib"] = peak_rss_mib()


# Phases


def build(resource_set, files: list[SourceFile]) -> dict[str, Any]:
    """The first dump: every package written from the files."""
    from sitemaps.regeneration import regenerate
    from sources.models import CapabilitySettings

    CapabilitySettings.objects.filter(resource_set=resource_set).update(publish_resource_dump=True)
    resource_set.refresh_from_db()
    figures: dict[str, Any] = {"bitstream_bytes": sum(f.length for f in files)}
    with measured(figures):
        report = regenerate(resource_set)
    check(report is not None and report.dumps is not None, "no dump was built")
    check(not report.dumps.skipped, f"resources not packaged: {report.dumps.skipped[:3]}")
    figures["packages"] = len(report.dumps.packages_written)
    figures["package_bytes"] = report.dumps.bytes_written
    figures["mb_per_second"] = round(figures["bitstream_bytes"] / 1e6 / figures["seconds"], 1)
    figures["files_per_second"] = round(len(files) / figures["seconds"], 1)
    return figures


def plain_zip(root: Path, files: list[SourceFile], work: Path) -> dict[str, Any]:
    """The baseline: the same files stored in one ZIP by zipfile, nothing checked or recorded."""
    figures: dict[str, Any] = {}
    target = work / "plain.zip"
    with measured(figures), zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as archive:
        for file in files:
            archive.write(root / file.path, file.path)
    target.unlink()
    figures["mb_per_second"] = round(sum(f.length for f in files) / 1e6 / figures["seconds"], 1)
    return figures


def update_one(resource_set, root: Path, files: list[SourceFile], make) -> dict[str, Any]:
    """Rewrite one file in the middle and ingest its event: exactly one package rebuilt."""
    from sitemaps.models import DumpState, ResourcePackage
    from sources.services import ingest_events

    before = dict(
        ResourcePackage.objects.filter(resource_set=resource_set).values_list("number", "etag")
    )
    chosen = files[len(files) // 2]
    data = make(len(files) + 1)
    (root / chosen.path).write_bytes(data)
    md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
    change = event(
        resource_set.url_prefix, chosen.path, data, md5, hashlib.sha256(data).hexdigest(), "updated"
    )
    figures: dict[str, Any] = {}
    with measured(figures):
        ingest_events(resource_set=resource_set, events=[change])  # regenerates after commit
    after = dict(
        ResourcePackage.objects.filter(resource_set=resource_set).values_list("number", "etag")
    )
    figures["packages_rebuilt"] = sorted(n for n in after if before.get(n) != after[n])
    state = DumpState.objects.get(resource_set=resource_set)
    figures["dump_step_seconds"] = round(state.duration.total_seconds(), 3)
    files[len(files) // 2] = SourceFile(
        chosen.path, len(data), md5, hashlib.sha256(data).hexdigest()
    )
    return figures


def check_packages(resource_set, files: list[SourceFile], sample: int) -> dict[str, int]:
    """Every resource once in the manifests; a seeded sample of bitstreams equals its file."""
    from sitemaps.dumps.storage import open_stored
    from sitemaps.models import ResourcePackage
    from sitemaps.protocol.reader import parse_document

    by_path = {f"/resources/{f.path}": f for f in files}
    chosen = {
        f"/resources/{f.path}" for f in random.Random(7).sample(files, min(sample, len(files)))
    }
    listed = 0
    for package in ResourcePackage.objects.filter(resource_set=resource_set).exclude(
        storage_name=""
    ):
        with open_stored(package.storage_name) as handle, zipfile.ZipFile(handle) as archive:
            manifest = parse_document(archive.read("manifest.xml"))
            for entry in manifest.entries:
                expected = by_path.get(entry.path or "")
                check(expected is not None, f"{entry.path} is not a resource of the set")
                check(entry.hash.get("md5") == expected.md5, f"{entry.path}: md5 differs")
                if entry.path in chosen:
                    data = archive.read(entry.path.lstrip("/"))
                    check(
                        hashlib.sha256(data).hexdigest() == expected.sha256, f"{entry.path} differs"
                    )
                listed += 1
    check(listed == len(files), f"the manifests list {listed} resources, expected {len(files)}")
    return {"listed": listed, "sample_checked": len(chosen)}


# Harvesting


def run_harvester(
    name: str, capability_list: str, work: Path, use_dumps: bool
) -> tuple[dict, Path]:
    destination = work / f"{name}-mirror"
    config = work / f"{name}.yaml"
    config.write_text(
        f"capability_list_url: {capability_list}\ndestination: {destination}\n"
        f"use_dumps: {'true' if use_dumps else 'false'}\ntimeout: 60\nretries: 2\n"
    )  # no concurrency: the harvester's default (HarvestConfig.concurrency)
    command = [str(PYTHON), "manage.py", "harvest", str(config), "--baseline"]
    figures = run_process(command, cwd=REPO, env=harvester_env(work), log=work / f"{name}.log")
    figures.update(harvest_summary(figures))
    return figures, destination


def harvest_three_ways(
    resource_set, site: Path, base_url: str, work: Path, files: list[SourceFile]
) -> dict[str, Any]:
    """Our harvester from the dump and from the list, then resync-sync, all from `base_url`.

    Each destination is checked and kept until the work folder goes: a
    deletion here would slow the next harvest's file creation (`remove_work`).
    """
    from sitemaps.descriptions import capability_list

    folder = site / "resourcesync" / resource_set.provider.slug / resource_set.slug
    (folder / "capabilitylist.xml").write_bytes(capability_list(resource_set))
    url = f"{base_url}/resourcesync/{resource_set.path}/capabilitylist.xml"
    served = [
        SourceFile(f"files/{resource_set.slug}/{f.path}", f.length, f.md5, f.sha256) for f in files
    ]
    host_folder = base_url.removeprefix("http://").replace(":", "_")
    results: dict[str, Any] = {"files": len(files), "base_url": base_url}
    for name, use_dumps in (("dump", True), ("list", False)):
        say(f"harvester baseline from the Resource {'Dump' if use_dumps else 'List'} ...")
        figures, destination = run_harvester(f"{resource_set.slug}-{name}", url, work, use_dumps)
        results[name] = checked_run(name, figures, destination / host_folder, served, site)
    say("resync-sync --baseline ...")
    figures, destination = run_resync(url, base_url, work, 60, f"{resource_set.slug}-resync")
    results["resync"] = checked_run("resync", figures, destination, served, site)
    dump = results["dump"]
    for other in ("list", "resync"):
        results[f"dump_vs_{other}"] = round(
            dump["resources_per_second"] / results[other]["resources_per_second"], 1
        )
    if dump.get("harvest_seconds") and results["list"].get("harvest_seconds"):
        results["dump_vs_list_harvest_only"] = round(
            results["list"]["harvest_seconds"] / dump["harvest_seconds"], 1
        )
    return results


def checked_run(
    name: str, figures: dict[str, Any], copies: Path, served: list[SourceFile], site: Path
) -> dict[str, Any]:
    figures.update(verify(name, figures, copies, served, site, 500))
    figures["resources_per_second"] = round(len(served) / figures["seconds"], 1)
    if figures.get("harvest_seconds"):  # ours: the harvest without the process's start
        figures["harvest_resources_per_second"] = round(len(served) / figures["harvest_seconds"], 1)
    say(f"{figures['seconds']} s, {figures['resources_per_second']}/s ({figures.get('summary')})")
    return figures


def creation_floor(files: list[SourceFile], root: Path) -> dict[str, Any]:
    """Creating the same files with nothing else (open, write, close): what any harvest pays.

    No temporary name, rename, check, hash or state: the file system's own
    cost per new file on this disk, which bounds a baseline from a dump. The
    files stay in `root` until the work folder goes, like the harvests' copies.
    """
    body = b"x" * max(file.length for file in files)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    started, cpu = time.perf_counter(), cpu_seconds()
    made: set[str] = set()
    for file in files:
        folder, _, _ = file.path.rpartition("/")
        if folder not in made:
            (root / folder).mkdir(parents=True, exist_ok=True)
            made.add(folder)
        handle = os.open(root / file.path, flags, 0o644)
        os.write(handle, body[: file.length])
        os.close(handle)
    seconds = time.perf_counter() - started
    figures = {
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu_seconds() - cpu, 3),
        "files_per_second": round(len(files) / seconds, 1),
    }
    return figures


# Main


def configure(work: Path, site: Path, base_url: str, database: str) -> None:
    os.environ.update(
        DJANGO_SETTINGS_MODULE="resourcesync_portal.settings",
        DATA_DIR=str(work / "portal"),
        DATABASE_URL=database,
        PUBLIC_BASE_URL=base_url,
        RESOURCESYNC_PUBLISHED_DIR=str(site),
    )
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    for name in ("CELERY_BROKER_URL", "RESOURCESYNC_STORAGE_BACKEND", "ELASTICSEARCH_URL",
                 "RESOURCESYNC_DUMP_PACKAGE_BYTES", "RESOURCESYNC_DUMP_COMPRESSION"):  # fmt: skip
        os.environ.pop(name, None)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def new_set(slug: str, count: int, make, site: Path, base_url: str) -> tuple[Any, Path, list]:
    """A set of `count` files under site/files/<slug>, ingested, its lists written."""
    root = site / "files" / slug
    root.mkdir(parents=True)
    url_prefix = f"{base_url}/files/{slug}/"
    resource_set = make_set(slug, root, url_prefix)
    started = time.perf_counter()
    events, files = write_files(root, count, make, url_prefix)
    load(resource_set, events)
    say(f"{slug}: {count:,} files written and ingested in {time.perf_counter() - started:.1f} s")
    return resource_set, root, files


def one_set(slug: str, count: int, make, site: Path, base_url: str) -> tuple[Any, list, dict]:
    resource_set, root, files = new_set(slug, count, make, site, base_url)
    figures = {"files": count, "plain_zip": plain_zip(root, files, site.parent)}
    say(f"{slug}: baseline, zipfile alone: {figures['plain_zip']}")
    figures["build"] = build(resource_set, files)
    say(f"{slug}: dump built: {figures['build']}")
    figures["update"] = update_one(resource_set, root, files, make)
    say(f"{slug}: one update: {figures['update']}")
    figures["checked"] = check_packages(resource_set, files, 500)
    return resource_set, files, figures


def default_concurrency() -> int:
    """The harvester's default download threads: the bench's configs leave it unset."""
    from harvester.config import HarvestConfig

    return next(f.default for f in dataclasses.fields(HarvestConfig) if f.name == "concurrency")


def harvest_with_latency(
    args: argparse.Namespace, site: Path, server_url: str, work: Path
) -> dict[str, Any]:
    """The three harvests again, through toxiproxy with the round-trip time, on their own set.

    The set (`--rtt-size` small files, the first ones of the small set's
    content) is written, and its dump built, with PUBLIC_BASE_URL naming the
    proxy, so every document, package and file the harvesters fetch comes
    through it.
    """
    from django.test import override_settings

    port = int(server_url.rpartition(":")[2])
    with (
        latency_proxy(port, args.rtt_ms) as proxy,
        override_settings(PUBLIC_BASE_URL=proxy["base_url"]),
    ):
        say(f"through toxiproxy at {proxy['base_url']}, RTT {args.rtt_ms} ms ({proxy['toxics']})")
        resource_set, _, files = new_set(
            "rtt", args.rtt_size, small_content, site, proxy["base_url"]
        )
        proxy["dump_build"] = build(resource_set, files)
        proxy["measured_get_ms"] = measured_rtt_ms(proxy["base_url"], "/files/rtt/0000/0000000.bin")
        say(f"one GET through the proxy: {proxy['measured_get_ms']} ms")
        check(proxy["measured_get_ms"] >= args.rtt_ms, "the proxy adds less than the RTT")
        proxy["floor"] = creation_floor(files, work / "rtt-floor")
        say(f"file-creation floor, just before: {proxy['floor']}")
        proxy.update(harvest_three_ways(resource_set, site, proxy["base_url"], work, files))
    return proxy


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    site = work / "site"
    site.mkdir()
    results: dict[str, Any] = {
        "small": args.small, "large": args.large, "rtt_ms": args.rtt_ms,
        "rtt_size": args.rtt_size, "database_engine": database_name(args.postgres),
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "load_at_start": list(os.getloadavg())},
    }  # fmt: skip
    with (
        static_server(args.server, site, work) as server,
        database_url(work, args.postgres, "dumps", keep=args.keep) as database,
    ):
        base_url = server.pop("base_url")
        results["server"] = server
        configure(work, site, base_url, database)
        results["concurrency"] = default_concurrency()
        small_set, small_files, results["small_set"] = one_set(
            "small", args.small, small_content, site, base_url
        )
        _, _, results["large_set"] = one_set("large", args.large, large_content, site, base_url)
        results["harvest"] = harvest_three_ways(small_set, site, base_url, work, small_files)
        results["harvest"]["floor"] = creation_floor(small_files, work / "floor")
        say(f"file-creation floor: {results['harvest']['floor']}")
        if args.rtt_ms:
            results["latency"] = harvest_with_latency(args, site, base_url, work)
    results["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    results["rows"] = rows(results)
    return results


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    table = []
    for key, label in (("small_set", "small files (0.1-1.1 KB)"), ("large_set", "files of 1 MiB")):
        table += dump_rows(results[key], label)
    table += harvest_rows(results)
    return table


def dump_rows(figures: dict[str, Any], label: str) -> list[dict[str, Any]]:
    build_figures, update, plain = figures["build"], figures["update"], figures["plain_zip"]
    return [
        row(
            "13", f"Resource Dump of {figures['files']:,} {label}: build",
            "", f"{build_figures['seconds']:.1f} s, {build_figures['mb_per_second']} MB/s, "
            f"{build_figures['files_per_second']:,.0f} files/s, "
            f"{build_figures['packages']} packages",
            baseline=f"zipfile alone {plain['seconds']:.1f} s ({plain['mb_per_second']} MB/s)",
            ratio=build_figures["seconds"] / plain["seconds"],
        ),
        row(
            "13", f"Resource Dump of {figures['files']:,} {label}: peak RSS",
            "flat (≤ 512 MiB)", f"{build_figures['peak_rss_mib']:.0f} MiB",
            baseline=f"zipfile alone {plain['peak_rss_mib']:.0f} MiB",
            met=build_figures["peak_rss_mib"] <= 512,
        ),
        row(
            "13", f"Resource Dump of {figures['files']:,} {label}: one update",
            "exactly 1 package rebuilt",
            f"packages {update['packages_rebuilt']} in {update['dump_step_seconds']:.2f} s "
            f"(ingest + regeneration {update['seconds']:.2f} s)",
            baseline=f"full build {build_figures['seconds']:.1f} s",
            ratio=update["dump_step_seconds"] / build_figures["seconds"],
            met=len(update["packages_rebuilt"]) == 1,
        ),
    ]  # fmt: skip


GOAL = "≥ 10x the Resource List baseline"


def harvest_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The goal is judged with the RTT when one was given; the local figure stays beside it."""
    local = results["harvest"]
    latency = results.get("latency")
    rows = [
        row(
            "13", f"Harvester baseline from the Resource Dump, {local['files']:,} small files, "
            "no network latency (local nginx)",
            "" if latency else GOAL, rates(local)[0],
            baseline=rates(local)[1] + f"; creating the files alone "
            f"{local['floor']['files_per_second']:,.0f}/s",
            ratio=local["dump_vs_list"], met=None if latency else local["dump_vs_list"] >= 10,
        )
    ]  # fmt: skip
    if latency:
        rows.append(row(
            "13", f"Harvester baseline from the Resource Dump, {latency['files']:,} small files, "
            f"{results['rtt_ms']} ms RTT (toxiproxy), concurrency {results['concurrency']}",
            GOAL, rates(latency)[0],
            baseline=rates(latency)[1] + f"; creating the files alone just before "
            f"{latency['floor']['files_per_second']:,.0f}/s; at 0 ms ({local['files']:,} files) "
            f"dump/list {local['dump_vs_list']}x",
            ratio=latency["dump_vs_list"], met=latency["dump_vs_list"] >= 10,
        ))  # fmt: skip
    return rows


def rates(harvest: dict[str, Any]) -> tuple[str, str]:
    """What the row measures (the dump) and its baselines (the list, resync-sync)."""
    dump, listing, resync = harvest["dump"], harvest["list"], harvest["resync"]
    return (
        f"{dump['resources_per_second']:,.0f} resources/s ({dump['seconds']:.1f} s)",
        f"list {listing['resources_per_second']:,.0f}/s ({listing['seconds']:.1f} s); "
        f"resync-sync {resync['resources_per_second']:,.0f}/s ({resync['seconds']:.1f} s)",
    )


def summary(results: dict[str, Any]) -> Iterator[str]:
    for line in results["rows"]:
        yield f"{line['figure']}: {line['measured']} ({line['baseline']}) goal {line['goal']}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=100_000, help="small files (100,000)")
    parser.add_argument("--large", type=int, default=1_000, help="files of 1 MiB (1,000)")
    parser.add_argument("--server", choices=("auto", "nginx", "python"), default="auto")
    parser.add_argument("--output", type=Path, help="results JSON (bench/results/dumps-...)")
    parser.add_argument(
        "--rtt-ms", type=int, default=0, metavar="N",
        help="also harvest through toxiproxy with this round-trip time (0: not)",
    )  # fmt: skip
    parser.add_argument(
        "--rtt-size", type=int, default=10_000, help="small files harvested with the RTT (10,000)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    add_database_argument(parser)
    args = parser.parse_args(argv)
    if args.small < 10 or args.large < 2 or args.rtt_size < 10:
        parser.error("--small and --rtt-size must be at least 10, --large at least 2")
    if args.rtt_ms < 0:
        parser.error("--rtt-ms must be 0 or more")
    return args


def main(argv: list[str] | None = None) -> int:
    return run_in_work_folder("dumps", parse_args(argv), run, summary)


if __name__ == "__main__":
    sys.exit(main())
