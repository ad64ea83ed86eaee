"""Run every benchmark beside its baseline and collect one results file: `make bench`.

    .venv/bin/python bench/run.py [--smoke] [--only NAME ...] [--databases sqlite,postgres]
        [--es-port 9260] [--redis-port 6399] [--pg-port 5460] [--keep-services]

Elasticsearch, Redis and PostgreSQL are started with scripts/elasticsearch.sh,
scripts/redis.sh and scripts/postgres.sh on their own ports (Elasticsearch in
its own ES_HOME_DIR, PostgreSQL in its own data directory), so a test suite
running at the same time keeps its own; the ones this run started are stopped
at the end. The benchmarks that use the portal's database run once per
database of --databases (both by default, SQLite first, one after the other
so the two figures share the machine's state), each over a fresh database.
nginx and wrk come from Debian (apt-get) if missing. Each benchmark is its own
process, given `--size` for the mode; its output goes to the console and to
bench/work/run-<date>/ (`<name>.<database>.log` for the per-database ones).

A full run writes bench/results/<date>.json and appends the table (database,
figure, goal, measured, baseline, ratio, met or missed) to bench/README.md. A smoke
run (`--smoke`, small sizes, a few minutes: CI runs it so the scripts never
rot) writes bench/work/results/smoke-<date>.json only, so it never dirties the
clone. The exit status is non-zero if any benchmark failed; a missed goal is
not a failure, the table says MISSED.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, RESULTS, SET_ASIDE, WORK, machine, need_command, row

README = REPO / "bench" / "README.md"
SCRIPTS = REPO / "scripts"
FULL_SIZE = 1_000_000


@dataclass
class Benchmark:
    name: str
    script: str
    full: list[str]
    smoke: list[str]
    services: bool = False  # takes --elasticsearch and --redis
    elasticsearch_only: bool = False  # takes --elasticsearch
    per_database: bool = False  # runs once per database (--postgres for PostgreSQL)
    postgres_only: bool = False  # of the per-database runs, only PostgreSQL's
    redis_only: bool = False  # takes --redis (not --elasticsearch)
    optional: bool = False  # runs only when named with --only
    database: str = ""  # sqlite or postgres, for the runs of a per_database benchmark
    seconds: float = 0.0
    exit_code: int | None = None
    problem: str = ""  # why its figures cannot be reported; empty when it ran well
    results: dict[str, Any] = field(default_factory=dict)


def benchmarks() -> list[Benchmark]:
    """In the order they run; each baseline beside (or inside) its figure."""
    return [
        Benchmark(
            "resync_baseline", "resync_baseline.py", ["--size", "1000000"], ["--size", "10000"]
        ),
        Benchmark(
            "resource_list", "resource_list.py",
            ["--size", "1000000", "--repeat", "3"], ["--size", "10000", "--repeat", "1"],
            elasticsearch_only=True, per_database=True,
        ),
        Benchmark(
            "ingest", "ingest.py", ["--size", "200000"], ["--size", "5000", "--batch", "1000"],
            services=True, per_database=True,
        ),
        Benchmark(
            "freshness", "freshness.py", ["--size", "75000", "--samples", "10"],
            ["--size", "5000", "--samples", "3"], services=True, per_database=True,
        ),
        Benchmark(
            "serve", "serve.py", ["--size", "50000", "--duration", "10", "--rounds", "3"],
            ["--size", "10000", "--duration", "2", "--rounds", "1"], services=True,
            per_database=True,
        ),
        Benchmark(
            "notifications", "notifications.py", ["--samples", "20", "--subscribers", "100"],
            ["--samples", "5", "--subscribers", "100"], services=True, per_database=True,
        ),
        Benchmark(
            "harvest", "harvest.py", ["--size", "100000", "--resync-size", "10000"],
            ["--size", "2000", "--resync-size", "500"],
        ),
        Benchmark(  # the harvests again through toxiproxy at a same-continent RTT
            "dumps", "dumps.py",
            ["--small", "100000", "--large", "1000", "--rtt-ms", "25", "--rtt-size", "10000"],
            ["--small", "2000", "--large", "20", "--rtt-ms", "5", "--rtt-size", "200"],
            per_database=True,
        ),
        Benchmark("scan", "scan.py", ["--size", "100000"], ["--size", "2000"], per_database=True),
        Benchmark(  # about 40 min and 30 GB of disk at full size: by hand, `--only large_set`
            "large_set", "large_set.py", ["--size", "10000000"],
            ["--size", "200000", "--http-events", "20000"], per_database=True,
            postgres_only=True, redis_only=True, optional=True,
        ),
    ]  # fmt: skip


DATABASES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


def per_database(selected: list[Benchmark], databases: list[str]) -> list[Benchmark]:
    """Each per-database benchmark once per database, one after the other."""
    runs = []
    for benchmark in selected:
        if not benchmark.per_database:
            runs.append(benchmark)
            continue
        wanted = [name for name in databases if name == "postgres" or not benchmark.postgres_only]
        runs += [replace(benchmark, database=database) for database in wanted]
    return runs


def key(benchmark: Benchmark) -> str:
    """Its name in the results and logs: `ingest.postgres`, `harvest`."""
    return f"{benchmark.name}.{benchmark.database}" if benchmark.database else benchmark.name


# Services


class Services:
    """Elasticsearch, Redis and PostgreSQL through scripts/*.sh; stops only what it started."""

    def __init__(
        self, es_port: int, redis_port: int, pg_port: int, *, postgres: bool, keep: bool
    ) -> None:
        home = os.environ.get("BENCH_ES_HOME_DIR", str(REPO / ".cache" / "elasticsearch-bench"))
        self.env = {
            **os.environ,
            "ES_PORT": str(es_port),
            "ES_HOME_DIR": home,
            "ES_JAVA_OPTS": os.environ.get("BENCH_ES_JAVA_OPTS", "-Xms1g -Xmx1g"),
            "REDIS_PORT": str(redis_port),
            "PG_PORT": str(pg_port),
        }
        self.elasticsearch = f"http://127.0.0.1:{es_port}"
        self.redis = f"redis://127.0.0.1:{redis_port}/1"
        # The cluster's maintenance database: each benchmark creates (and drops) its own.
        self.postgres = f"postgres://resourcesync@127.0.0.1:{pg_port}/resourcesync"
        self.names = ["elasticsearch", "redis"] + (["postgres"] if postgres else [])
        self.keep = keep
        self.started: list[str] = []

    def __enter__(self) -> Services:
        for name in self.names:
            script = str(SCRIPTS / f"{name}.sh")
            status = subprocess.run(
                [script, "status"], env=self.env, capture_output=True, check=False
            )
            if status.returncode != 0:
                # One retry: a node stopped a moment ago may still hold its port.
                if subprocess.run([script, "start"], env=self.env, check=False).returncode:
                    time.sleep(15)
                    subprocess.run([script, "start"], env=self.env, check=True)
                self.started.append(name)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.keep:
            return
        for name in reversed(self.started):
            subprocess.run([str(SCRIPTS / f"{name}.sh"), "stop"], env=self.env, check=False)


# Running


def run_one(benchmark: Benchmark, args: argparse.Namespace, services: Services, logs: Path) -> None:
    output = logs / f"{key(benchmark)}.json"
    command = [sys.executable, str(REPO / "bench" / benchmark.script)]
    command += benchmark.smoke if args.smoke else benchmark.full
    command += ["--output", str(output)]
    if benchmark.services:
        command += ["--elasticsearch", services.elasticsearch, "--redis", services.redis]
    if benchmark.redis_only:
        command += ["--redis", services.redis]
    if benchmark.elasticsearch_only:
        command += ["--elasticsearch", services.elasticsearch]
    if benchmark.database == "postgres":
        command += ["--postgres", services.postgres]
    print(f"\n=== {key(benchmark)}: {' '.join(command[1:])}", flush=True)
    started = time.perf_counter()
    with (logs / f"{key(benchmark)}.log").open("w") as log:
        process = subprocess.Popen(
            command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            preexec_fn=default_sigint,
        )  # fmt: skip
        try:
            for line in process.stdout:
                sys.stdout.write(line)
                log.write(line)
        finally:
            if process.poll() is None:  # interrupted: let it stop its servers and clean up
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    process.kill()
            benchmark.exit_code = process.wait()
    benchmark.seconds = round(time.perf_counter() - started, 1)
    if benchmark.exit_code != 0:
        benchmark.problem = f"exit status {benchmark.exit_code}"
    elif not output.exists():
        benchmark.problem = "exited 0 without writing its results"
    else:
        benchmark.results = json.loads(output.read_text())
    print(f"=== {key(benchmark)}: exit {benchmark.exit_code} in {benchmark.seconds} s", flush=True)


def run_all(
    selected: list[Benchmark], args: argparse.Namespace, services: Services, logs: Path
) -> None:
    """One after the other; their work folders are deleted only at the end.

    A deletion slows the next benchmark's file creation on this machine
    (`common.remove_work`), so the scripts move theirs aside instead.
    """
    set_aside = os.environ[SET_ASIDE] = str(logs.with_name(f"set-aside-{logs.name}"))
    try:
        for benchmark in selected:
            run_one(benchmark, args, services, logs)
    finally:
        del os.environ[SET_ASIDE]
        shutil.rmtree(set_aside, ignore_errors=True)


def default_sigint() -> None:
    """In the child, before exec: SIGINT back to its default.

    A background job inherits SIGINT ignored; the benchmark must still get its
    KeyboardInterrupt when the run is stopped, so that it cleans up.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# The table: rows from the scripts that write them, adapters for the others


#: Items 1 and 2 by generator: seconds for 1,000,000, times faster than resync's
#: write of the same entries, peak MiB, seconds for one change (issue 17 for the database).
RESOURCE_LIST_GOALS = (
    {"database": 6.5, "elasticsearch": 15},
    {"database": 7.0, "elasticsearch": 3.0},
    {"database": 200, "elasticsearch": 200},
    {"database": 0.5, "elasticsearch": 1},
)


def resource_list_rows(results: dict[str, Any], baseline: dict[str, Any]) -> list[dict[str, Any]]:
    """Items 1 and 2 from bench/resource_list.py's JSON, beside resync's write."""
    rows = []
    size = results["size"]
    goals, speedups, memory, change_seconds = RESOURCE_LIST_GOALS
    for name, goal_seconds in goals.items():
        if name not in results:
            rows.append(row("1", f"Full Resource List, {name}", "", "not measured", met=False))
            continue
        full = results[name]["full"]
        goal_rate = FULL_SIZE / goal_seconds
        rate = full["median_entries_per_second"]
        resync = f"resync {baseline['write_seconds']:.2f} s" if baseline else "not measured"
        ratio = full["median_seconds"] / baseline["write_seconds"] if baseline else None
        speedup = speedups[name]
        fast_enough = not speedup or ratio is None or ratio <= 1 / speedup
        rows.append(
            row(
                "1",
                f"Full Resource List from {name}, {size:,} entries",
                f"≤ {goal_seconds} s for 1,000,000 (≥ {goal_rate:,.0f} entries/s)"
                + (f", ≥ {speedup:g}x resync" if speedup else ""),
                f"{full['median_seconds']:.2f} s ({rate:,} entries/s)",
                baseline=resync,
                ratio=ratio,
                met=rate >= goal_rate and fast_enough,
            )
        )
        peak = full["max_peak_rss_mib"]
        rows.append(
            row(
                "1",
                f"Peak memory, full Resource List from {name}",
                f"flat (≤ {memory[name]} MiB)",
                f"{peak:,.0f} MiB",
                baseline=f"resync {baseline['peak_rss_mib']:,.0f} MiB" if baseline else "",
                ratio=peak / baseline["peak_rss_mib"] if baseline else None,
                met=peak <= memory[name],
            )
        )
        for change in ("update", "create", "delete"):
            if change not in results[name]:
                continue
            figures = results[name][change]
            pages = figures["pages_written"]
            indexes = figures["indexes_written"]
            rows.append(
                row(
                    "2",
                    f"Incremental {change}, {name}: documents rewritten",
                    "1 page + the index",
                    f"pages {pages} + {', '.join(indexes)}",
                    met=len(pages) == 1 and "resourcelist.xml" in indexes,
                )
            )
            rows.append(
                row(
                    "2",
                    f"Incremental {change}, {name}: time",
                    f"≤ {change_seconds[name]:g} s",
                    f"{figures['seconds']:.2f} s",
                    baseline=f"full {full['median_seconds']:.2f} s",
                    ratio=figures["seconds"] / full["median_seconds"],
                    met=figures["seconds"] <= change_seconds[name],
                )
            )
    return rows


def harvest_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Item 6 from bench/harvest.py's JSON; issue 17's goals."""
    ours, same, resync = results["ours"], results["ours_subset"], results["resync"]
    against = f"resync-sync {resync['resources_per_second']:,.0f}/s ({results['resync_size']:,})"
    same_ratio = same["resources_per_second"] / resync["resources_per_second"]
    return [
        row(
            "6",
            f"Harvester baseline, {results['size']:,} resources",
            "≥ 1,500 resources/s",
            f"{ours['resources_per_second']:,.0f} resources/s ({ours['seconds']:.1f} s)",
            baseline=against,
            ratio=results["ratio"],
            met=ours["resources_per_second"] >= 1500,
        ),
        row(
            "6",
            f"Harvester baseline, same {results['resync_size']:,} resources as resync",
            "≥ 2x resync-sync",
            f"{same['resources_per_second']:,.0f} resources/s ({same['seconds']:.1f} s)",
            baseline=against,
            ratio=same_ratio,
            met=same_ratio >= 2,
        ),
    ]


def table_rows(runs: list[Benchmark]) -> list[dict[str, Any]]:
    """Every run's rows, each naming the database it ran on ("" when it uses none)."""
    rows = []
    baseline_results = next((b.results for b in runs if b.name == "resync_baseline"), {})
    for benchmark in runs:
        database = DATABASES.get(benchmark.database, "")
        lines = benchmark_rows(benchmark, baseline_results)
        rows += [{**line, "database": database} for line in lines]
    return rows


def benchmark_rows(benchmark: Benchmark, baseline_results: dict[str, Any]) -> list[dict[str, Any]]:
    if benchmark.problem:
        return [row("", key(benchmark), "", f"FAILED ({benchmark.problem})", met=False)]
    try:
        if benchmark.name == "resource_list":
            return resource_list_rows(benchmark.results, baseline_results)
        if benchmark.name == "harvest":
            return harvest_rows(benchmark.results)
        return list(benchmark.results["rows"])
    except (KeyError, TypeError, ZeroDivisionError) as error:
        # The script's JSON changed shape: say so instead of guessing.
        benchmark.problem = f"unreadable results: {error!r}"
        return [row("", key(benchmark), "", f"unreadable results ({error!r})", met=False)]


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| Item | Database | Figure | Goal | Measured | Baseline | Ratio | Met |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for line in rows:
        verdict = {True: "met", False: "**MISSED**", None: "—"}[line["met"]]
        ratio = "" if line["ratio"] is None else f"{line['ratio']:g}x"
        cells = [line["item"], line["database"], line["figure"], line["goal"], line["measured"],
                 line["baseline"], ratio, verdict]  # fmt: skip
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    return done.stdout.strip() or "unknown"


def append_to_readme(report: dict[str, Any], table: str) -> None:
    failed = [name for name, run in report["benchmarks"].items() if run["problem"]]
    missed = [
        f"{line['figure']} ({line['database']})" if line["database"] else line["figure"]
        for line in report["rows"]
        if line["met"] is False and line["item"]
    ]
    verdicts = []
    if failed:
        verdicts.append(f"**Failed** (no figures): {', '.join(failed)}.")
    verdicts.append(
        f"**Missed**: {'; '.join(missed)}." if missed else "Every measured goal was met."
    )
    date = datetime.fromisoformat(report["date"]).strftime("%Y-%m-%d %H:%M UTC")
    load = report["machine"]["load"]
    section = (
        f"\n### {date} (commit {report['commit']})\n\n"
        f"Full run, {report['machine']['cpus']} CPUs, load average {load[0]} at the start; "
        f"{report['seconds'] / 60:.0f} min. Results: `bench/results/{report['file']}`.\n\n"
        f"{table}\n\n{' '.join(verdicts)}\n"
    )
    with README.open("a") as readme:
        readme.write(section)


def database_list(text: str) -> list[str]:
    """`--databases sqlite,postgres`: known names, each once, in the order given."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in DATABASES]
    if not names or unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"a comma-separated list of {', '.join(DATABASES)}, each once (got {text!r})"
        )
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes, results not kept in git")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these benchmarks only")
    parser.add_argument("--es-port", type=int, default=9260)
    parser.add_argument("--redis-port", type=int, default=6399)
    parser.add_argument("--pg-port", type=int, default=5460)
    parser.add_argument(
        "--databases", type=database_list, default=list(DATABASES), metavar="sqlite,postgres",
        help="the databases the per-database benchmarks run on, in order (both)",
    )  # fmt: skip
    parser.add_argument("--keep-services", action="store_true", help="leave the services running")
    args = parser.parse_args(argv)
    chosen = (
        [b for b in benchmarks() if b.name in args.only]
        if args.only
        else [b for b in benchmarks() if not b.optional]
    )
    if args.only and len(chosen) != len(args.only):
        parser.error(f"known benchmarks: {', '.join(b.name for b in benchmarks())}")
    selected = per_database(chosen, args.databases)

    # A TERM (CI timeout, kill) unwinds like Ctrl-C: benchmarks and services are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.perf_counter()
    now = datetime.now(UTC)
    stamp = now.strftime("%Y-%m-%dT%H%M%S")
    logs = WORK / f"run-{stamp}"
    logs.mkdir(parents=True)
    for command, package in (("nginx", "nginx"), ("wrk", "wrk")):
        need_command(command, package)  # serve.py and harvest.py say what they lack
    report: dict[str, Any] = {
        "date": now.isoformat(timespec="seconds"),
        "mode": "smoke" if args.smoke else "full",
        "commit": commit(),
        "machine": machine(),
    }
    postgres = any(b.database == "postgres" for b in selected)
    with Services(
        args.es_port, args.redis_port, args.pg_port, postgres=postgres, keep=args.keep_services
    ) as services:
        report["services"] = {"elasticsearch": services.elasticsearch, "redis": services.redis}
        if postgres:
            report["services"]["postgres"] = services.postgres
        report["databases"] = args.databases
        run_all(selected, args, services, logs)
    report["rows"] = table_rows(selected)
    report["benchmarks"] = {
        key(b): {
            "database": b.database,
            "exit_code": b.exit_code,
            "problem": b.problem,
            "seconds": b.seconds,
            "results": b.results,
        }
        for b in selected
    }
    report["seconds"] = round(time.perf_counter() - started, 1)
    name = f"smoke-{stamp}.json" if args.smoke else f"{stamp}.json"
    output = (WORK / "results" if args.smoke else RESULTS) / name
    report["file"] = name
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(report["rows"])
    if not args.smoke and not args.only:
        append_to_readme(report, table)
    failed = [key(b) for b in selected if b.problem]
    if args.smoke:
        print("\nSmoke sizes: the verdicts below are indicative only (goals are for full sizes).")
    print(f"\n{table}\n")
    print(f"results: {output} ({report['seconds']:.0f} s; logs in {logs})")
    if failed:
        print(f"FAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
