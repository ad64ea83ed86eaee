"""Time a harvester baseline of N small resources from a local static source, beside resync.

    .venv/bin/python bench/harvest.py [--size 100000] [--resync-size 10000]
        [--concurrency 4] [--part-size 50000] [--server auto|nginx|python]
        [--output FILE] [--keep]

Everything lives in a fresh folder under bench/work/ (git-ignored), removed at
the end unless --keep. The source is N files of 100 to 1,100 bytes, 1,000 per
folder, described with their length, md5 and sha-256 by a Resource List (a
Resource List Index of `--part-size`-entry parts once N is larger) and a
Capability List, all written with the `resync` library, so neither harvester
reads documents written by our own code. A second Capability List and
Resource List describe the first `--resync-size` of the same files.

The files are served on 127.0.0.1 by nginx (Debian's, with sendfile and
keep-alive) when it is installed, else by a threading HTTP/1.1 server in a
subprocess; the output says which. Then, each as its own process, timed
from start to exit:

- ours: `manage.py harvest CONFIG --baseline` over all N;
- ours again over the `--resync-size` subset, for a like-for-like figure;
- `resync-sync --baseline --hash md5 --hash sha-256` over the subset only, to
  keep the run short: it fetches one resource at a time, on a new connection
  each. Both verify md5 and sha-256 (resync only logs a mismatch); ours also
  writes each copy to a temporary file, checks for links on the way, renames
  it into place and keeps a state file.

A run counts only if it exited 0 and its destination holds exactly the files
listed, with a seeded sample (`--check-sample`) byte-identical to the source;
otherwise the script exits non-zero without reporting its rate. The last
three lines are our rate, resync's rate and their ratio; the JSON (`--output`,
default bench/results/harvest-<date>.json) has every figure with CPU seconds,
peak RSS and load averages, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, RESULTS, WORK, BenchFailure, check, load_average, remove_work

PYTHON = Path(sys.executable)  # the venv running the bench (a worktree may have no .venv)
RESYNC_SYNC = PYTHON.parent / "resync-sync"
FILES_PER_FOLDER = 1_000
FIRST_LASTMOD = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
RESERVED_PREFIX = ".resourcesync"  # the harvester's state and lock files


# The source


@dataclass(frozen=True, slots=True)
class SourceFile:
    path: str  # relative to the site root and to the base URL
    length: int
    md5: str
    sha256: str


def content(n: int) -> bytes:
    """100 to 1,100 bytes that differ per resource."""
    size = 100 + (n * 7_919) % 1_001
    seed = hashlib.sha256(str(n).encode()).hexdigest().encode()
    head = f"resource {n:07d}\n".encode()
    return (head + seed * (size // len(seed) + 1))[:size]


def write_files(site: Path, size: int) -> list[SourceFile]:
    files = []
    for n in range(size):
        path = f"r/{n // FILES_PER_FOLDER:04d}/{n:07d}.txt"
        data = content(n)
        target = site / path
        if n % FILES_PER_FOLDER == 0:
            target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        files.append(
            SourceFile(
                path=path,
                length=len(data),
                md5=hashlib.md5(data, usedforsecurity=False).hexdigest(),
                sha256=hashlib.sha256(data).hexdigest(),
            )
        )
    return files


def write_documents(
    site: Path, base_url: str, files: list[SourceFile], name: str, part_size: int
) -> dict[str, Any]:
    """A Capability List `<name>-capabilitylist.xml` and its Resource List, written by resync."""
    from resync import CapabilityList, Resource, ResourceList
    from resync.mapper import Mapper

    listing = ResourceList(mapper=Mapper([base_url + "/", str(site)]))
    listing.md_at = FIRST_LASTMOD.strftime("%Y-%m-%dT%H:%M:%SZ")
    listing.up = f"{base_url}/{name}-capabilitylist.xml"
    listing.max_sitemap_entries = part_size
    for n, file in enumerate(files):
        lastmod = FIRST_LASTMOD + dt.timedelta(seconds=n)
        listing.add(
            Resource(
                uri=f"{base_url}/{file.path}",
                lastmod=lastmod.strftime("%Y-%m-%dT%H:%M:%SZ"),
                length=file.length,
                md5=file.md5,
                sha256=file.sha256,
                mime_type="text/plain",
            )
        )
    listing.write(basename=str(site / f"{name}-resourcelist.xml"))
    capabilities = CapabilityList()
    capabilities.add_capability(uri=f"{base_url}/{name}-resourcelist.xml", name="resourcelist")
    (site / f"{name}-capabilitylist.xml").write_text(capabilities.as_xml(), encoding="utf-8")
    parts = sorted(site.glob(f"{name}-resourcelist*.xml"))
    return {
        "capability_list": f"{base_url}/{name}-capabilitylist.xml",
        "resource_list_is_index": len(parts) > 1,
        "documents": len(parts),
    }


# The static server


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BenchFailure(f"the server exited: {log.read_text(errors='replace')[-2000:]}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise BenchFailure(f"nothing listens on 127.0.0.1:{port}")


NGINX_CONF = """\
worker_processes auto;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
daemon off;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 60s;
    keepalive_requests 1000000;
    types {{ text/plain txt; application/xml xml; }}
    default_type application/octet-stream;
    client_body_temp_path {work}/nginx-temp/body;
    proxy_temp_path {work}/nginx-temp/proxy;
    fastcgi_temp_path {work}/nginx-temp/fastcgi;
    uwsgi_temp_path {work}/nginx-temp/uwsgi;
    scgi_temp_path {work}/nginx-temp/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {site};
    }}
}}
"""

# Keep-alive (HTTP/1.1) and silent: as close to a plain static server as the stdlib gets.
PYTHON_SERVER = """\
import functools, http.server, sys
class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else headers and body stall on delayed ACKs
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(
    ("127.0.0.1", int(sys.argv[1])), functools.partial(Handler, directory=sys.argv[2])
)
server.daemon_threads = True
server.serve_forever()
"""


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next(
        (path for path in ("/usr/sbin/nginx",) if os.access(path, os.X_OK)), None
    )


@contextmanager
def static_server(kind: str, site: Path, work: Path) -> Iterator[dict[str, Any]]:
    """Serve `site` on 127.0.0.1; yields the base URL and a description of the server."""
    port = free_port()
    binary = nginx_binary() if kind in ("auto", "nginx") else None
    if kind == "nginx" and binary is None:
        raise BenchFailure("--server nginx, but nginx is not installed (apt-get install nginx)")
    log = work / "server.log"
    if binary is not None:
        (work / "nginx-temp").mkdir()
        conf = work / "nginx.conf"
        conf.write_text(NGINX_CONF.format(work=work, port=port, site=site))
        version = subprocess.run(
            [binary, "-v"], capture_output=True, text=True, check=False
        ).stderr.strip()
        command = [binary, "-p", str(work), "-c", str(conf), "-e", str(work / "nginx-error.log")]
        info = {"server": "nginx", "version": version.removeprefix("nginx version: ")}
    else:
        command = [sys.executable, "-c", PYTHON_SERVER, str(port), str(site)]
        info = {"server": "ThreadingHTTPServer subprocess", "version": sys.version.split()[0]}
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, process, log)
        info["base_url"] = f"http://127.0.0.1:{port}"
        yield info
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# Runs


def run_process(command: list[str], *, cwd: Path, env: dict[str, str], log: Path) -> dict:
    """Run to exit; wall seconds, the child's own CPU seconds and peak RSS, load around it."""
    figures: dict[str, Any] = {"command": command, "load_before": load_average()}
    started = time.perf_counter()
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    figures["seconds"] = round(time.perf_counter() - started, 3)
    figures["exit_code"] = process.returncode
    figures["cpu_seconds"] = round(usage.ru_utime + usage.ru_stime, 3)
    figures["peak_rss_mib"] = round(usage.ru_maxrss / 1024, 1)
    figures["load_after"] = load_average()
    figures["log_tail"] = log.read_text(errors="replace").splitlines()[-5:]
    return figures


def harvester_env(work: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("CELERY_BROKER_URL", "ELASTICSEARCH_URL", "DATABASE_URL")
    }
    env.update(
        DJANGO_SETTINGS_MODULE="resourcesync_portal.settings",
        DATA_DIR=str(work / "django"),
        LOG_LEVEL="WARNING",
    )
    return env


def run_ours(
    name: str, capability_list: str, work: Path, concurrency: int, timeout: float
) -> tuple[dict, Path]:
    destination = work / f"{name}-mirror"
    config = work / f"{name}.yaml"
    config.write_text(
        f"capability_list_url: {capability_list}\n"
        f"destination: {destination}\n"
        f"concurrency: {concurrency}\n"
        f"timeout: {timeout}\n"
        "retries: 2\n"
    )
    command = [str(PYTHON), "manage.py", "harvest", str(config), "--baseline"]
    figures = run_process(command, cwd=REPO, env=harvester_env(work), log=work / f"{name}.log")
    figures["concurrency"] = concurrency
    figures.update(harvest_summary(figures))
    return figures, destination


def harvest_summary(figures: dict[str, Any]) -> dict[str, Any]:
    """The command's own summary line, which times the harvest without the start of the
    interpreter and Django."""
    summary = next((line for line in figures["log_tail"] if line.startswith("baseline:")), "")
    timed = re.search(r" in ([0-9.]+) s$", summary)
    return {"summary": summary, "harvest_seconds": float(timed.group(1)) if timed else None}


def run_resync(
    capability_list: str, base_url: str, work: Path, timeout: float, name: str = "resync"
) -> tuple[dict, Path]:
    destination = work / f"{name}-mirror"
    command = [
        str(RESYNC_SYNC), "--baseline", "--capabilitylist", capability_list,
        "--hash", "md5", "--hash", "sha-256", "--tries", "2", "--timeout", str(int(timeout)),
        f"{base_url}/={destination}",
    ]  # fmt: skip
    # resync keeps its state in the working folder: give it one of its own.
    cwd = work / f"{name}-cwd"
    cwd.mkdir()
    figures = run_process(command, cwd=cwd, env=dict(os.environ), log=work / f"{name}.log")
    return figures, destination


# Checking


def mirrored_files(root: Path) -> list[Path]:
    found = []
    for folder, folders, names in os.walk(root):
        if Path(folder) == root:
            folders[:] = [name for name in folders if not name.startswith(RESERVED_PREFIX)]
            names = [name for name in names if not name.startswith(RESERVED_PREFIX)]
        found.extend(Path(folder) / name for name in names)
    return found


def verify(
    label: str, figures: dict, copies: Path, files: list[SourceFile], site: Path, sample: int
) -> dict[str, Any]:
    """Exit code, exact file count under `copies`, a seeded sample compared byte for byte."""
    exit_code = figures["exit_code"]
    check(exit_code == 0, f"{label} exited {exit_code}: {figures['log_tail']}")
    present = mirrored_files(copies) if copies.is_dir() else []
    check(
        len(present) == len(files),
        f"{label}: {len(present)} files under {copies}, expected {len(files)}",
    )
    chosen = random.Random(len(files)).sample(files, min(sample, len(files)))
    for file in chosen:
        copy = copies / file.path
        check(copy.is_file(), f"{label}: {file.path} is missing")
        data = copy.read_bytes()
        check(
            len(data) == file.length and hashlib.sha256(data).hexdigest() == file.sha256,
            f"{label}: {file.path} differs from the source",
        )
        check(data == (site / file.path).read_bytes(), f"{label}: {file.path} differs in bytes")
    return {"files": len(present), "sample_checked": len(chosen)}


# Main


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def say_run(figures: dict[str, Any]) -> None:
    say(
        f"  {figures['seconds']} s, {figures['resources_per_second']}/s, "
        f"cpu {figures['cpu_seconds']} s, load {figures['load_after'][0]}"
    )


def rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else 0.0


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    site = work / "site"
    site.mkdir()
    results: dict[str, Any] = {
        "size": args.size,
        "resync_size": args.resync_size,
        "part_size": args.part_size,
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "load_at_start": load_average(),
        },
        "work": str(work),
    }
    figures: dict[str, Any] = {}
    started = time.perf_counter()
    files = write_files(site, args.size)
    figures["files_seconds"] = round(time.perf_counter() - started, 3)
    figures["bytes"] = sum(file.length for file in files)
    say(f"wrote {len(files):,} files ({figures['bytes']:,} bytes) in {figures['files_seconds']} s")
    with static_server(args.server, site, work) as server:
        base_url = server.pop("base_url")
        results["server"] = server
        say(f"serving {site} with {server['server']} {server['version']} at {base_url}")
        started = time.perf_counter()
        full = write_documents(site, base_url, files, "all", args.part_size)
        subset = write_documents(
            site, base_url, files[: args.resync_size], "subset", args.part_size
        )
        figures["documents_seconds"] = round(time.perf_counter() - started, 3)
        results["source"] = {**figures, "all": full, "subset": subset}
        # Our harvester keeps http://127.0.0.1:<port>/<path> at 127.0.0.1_<port>/<path>.
        host_folder = base_url.removeprefix("http://").replace(":", "_")

        say(f"ours: baseline of {args.size:,} resources ...")
        ours, destination = run_ours(
            "ours", full["capability_list"], work, args.concurrency, args.timeout
        )
        ours.update(verify("ours", ours, destination / host_folder, files, site, args.check_sample))
        ours["resources_per_second"] = rate(args.size, ours["seconds"])
        results["ours"] = ours
        say_run(ours)

        subset_files = files[: args.resync_size]
        say(f"ours: baseline of the {args.resync_size:,}-resource subset ...")
        same, destination = run_ours(
            "ours-subset", subset["capability_list"], work, args.concurrency, args.timeout
        )
        same.update(
            verify("ours (subset)", same, destination / host_folder, subset_files, site,
                   args.check_sample)
        )  # fmt: skip
        same["resources_per_second"] = rate(args.resync_size, same["seconds"])
        results["ours_subset"] = same
        say_run(same)

        say(f"resync-sync: baseline of the {args.resync_size:,}-resource subset ...")
        resync, destination = run_resync(subset["capability_list"], base_url, work, args.timeout)
        resync.update(verify("resync", resync, destination, subset_files, site, args.check_sample))
        resync["resources_per_second"] = rate(args.resync_size, resync["seconds"])
        results["resync"] = resync
        say_run(resync)
    results["ratio"] = round(ours["resources_per_second"] / resync["resources_per_second"], 1)
    results["ratio_same_size"] = round(
        same["resources_per_second"] / resync["resources_per_second"], 1
    )
    results["machine"]["load_at_end"] = load_average()
    results["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return results


def summary(results: dict[str, Any]) -> Iterator[str]:
    server = results["server"]
    ours, same, resync = results["ours"], results["ours_subset"], results["resync"]
    size, resync_size = results["size"], results["resync_size"]
    machine = results["machine"]
    yield (
        f"source: {size:,} files of 100-1,100 bytes served by {server['server']} "
        f"{server['version']}; {machine['cpus']} CPUs, load {machine['load_at_start'][0]:.2f} "
        f"at start, {machine['load_at_end'][0]:.2f} at end"
    )
    yield (
        f"ours on the {resync_size:,} subset: {same['seconds']:.1f} s = "
        f"{same['resources_per_second']:,.1f} resources/s "
        f"(like-for-like ratio {results['ratio_same_size']:.1f}x)"
    )
    yield (
        f"ours:   {size:,} resources in {ours['seconds']:.1f} s = "
        f"{ours['resources_per_second']:,.1f} resources/s "
        f"(concurrency {ours['concurrency']}, cpu {ours['cpu_seconds']:.0f} s, "
        f"peak RSS {ours['peak_rss_mib']:.0f} MiB)"
    )
    yield (
        f"resync: {resync_size:,} resources in {resync['seconds']:.1f} s = "
        f"{resync['resources_per_second']:,.1f} resources/s "
        f"(resync-sync measured on the first {resync_size:,} only, --resync-size)"
    )
    yield f"ratio:  {results['ratio']:.1f}x (ours resources/s / resync resources/s)"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100_000, help="resources for ours (100,000)")
    parser.add_argument(
        "--resync-size", type=int, default=10_000, help="resources for resync-sync (10,000)"
    )
    parser.add_argument("--concurrency", type=int, default=4, help="our parallel downloads (4)")
    parser.add_argument(
        "--part-size", type=int, default=50_000, help="entries per Resource List (50,000)"
    )
    parser.add_argument("--server", choices=("auto", "nginx", "python"), default="auto")
    parser.add_argument("--timeout", type=float, default=30.0, help="per request, seconds")
    parser.add_argument("--check-sample", type=int, default=500, help="copies compared in full")
    parser.add_argument("--output", type=Path, help="results JSON (bench/results/harvest-...)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    if args.size < 1 or args.resync_size < 1 or args.part_size < 1:
        parser.error("--size, --resync-size and --part-size must be positive")
    args.resync_size = min(args.resync_size, args.size)
    return args


def run_in_work_folder(
    name: str,
    args: argparse.Namespace,
    run: Callable[[argparse.Namespace, Path], dict[str, Any]],
    summary: Callable[[dict[str, Any]], Iterable[str]],
) -> int:
    """Run `run(args, work)` in a fresh work folder (kept on failure), write its JSON, print it."""
    stamp = dt.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    output = args.output or RESULTS / f"{name}-{stamp}.json"
    work = WORK / f"{name}-{stamp}-{os.getpid()}"
    work.mkdir(parents=True)
    work.chmod(0o755)  # nginx's workers run as another user
    try:
        results = run(args, work)
    except BenchFailure as failure:
        print(f"FAILED: {failure}", file=sys.stderr)
        print(f"work folder kept for inspection: {work}", file=sys.stderr)
        return 1
    if not args.keep:
        remove_work(work)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2) + "\n")
    for line in summary(results):
        print(line)
    print(f"results: {output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_in_work_folder("harvest", parse_args(argv), run, summary)


if __name__ == "__main__":
    sys.exit(main())
