"""Serving a stored 50,000-entry Resource List page: the portal beside nginx.

    .venv/bin/python bench/serve.py [--size 50000] [--duration 10] [--rounds 3]
        [--elasticsearch URL] [--redis URL] [--output FILE] [--keep]

The portal (gunicorn, 4 sync workers, see common.Portal) gets --size
resources through the API and writes them as one Resource List page. Then the
same load generator asks for that page, plain and gzip, at 1 and 4 concurrent
clients, from three servers:

- `front`: the portal as deployed, nginx running the shipped server block
  (deploy/nginx.conf) in front of gunicorn's sync workers; the page's public
  URL is answered from the published tree (sitemaps/publishing.py), Python is
  not involved;
- `gunicorn`: the portal alone, as deployed without the front server: a
  second gunicorn over the same portal with deploy/gunicorn.conf.py
  (threaded workers, keep-alive). The page is public, so the layer in front
  of Django (sitemaps/published_files.py) sends it from the published tree,
  without Django or the database;
- `django`: the same gunicorn with `?via=django` on the URL, which that layer
  leaves to Django: Django's view with its database lookup, what answers a
  protected set's documents, or every document when the tree is off (S3
  storage). Judged against the same goal, so the table never hides it;
- `nginx`, the baseline: Debian's nginx (sendfile on, gzip_static on) serving
  the very same stored file and its gzip twin by their storage path.

The goal is p50 within 1.5x of nginx for `front` and within 2x for
`gunicorn` and `django` (a Python request costs CPU that nginx's sendfile does not),
each on its own line. Servers rotate within each round, so
all see the same machine; the figure is the median over rounds.

The client is `wrk --latency` (installed with apt-get if missing), else a
small threaded Python client. Before timing, every server's body must be
byte-identical to the stored files, the front server must have answered
itself (nginx's ETag, not Django's), and the page must be a well-formed
urlset listing every resource in key order. Any non-2xx answer, socket error
or short body during a timed run fails the run.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    ALONE_PORT,
    ENTRIES_PER_PAGE,
    FRONT_PORT,
    NGINX_PORT,
    REPO,
    BenchFailure,
    Portal,
    add_portal_arguments,
    check,
    database_name,
    finish,
    log,
    machine,
    need_command,
    now_iso,
    parse_document,
    percentile,
    resource_uri,
    row,
    url_entries,
)

#: p50 at most this many times nginx's, per server.
GOAL_RATIO = {"front": 1.5, "gunicorn": 2.0, "django": 2.0}
CONCURRENCIES = (1, 4)
ENCODINGS = ("plain", "gzip")
SERVERS = ["front", "gunicorn", "django", "nginx"]
#: What the published-tree layer leaves to Django's view (any query string).
THROUGH_DJANGO = "?via=django"

NGINX_CONF = """\
worker_processes auto;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
daemon off;
events {{ worker_connections 1024; }}
http {{
    types {{ application/xml xml; }}
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 65;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        gzip_static on;
    }}
    include {front};
}}
"""
SERVER_BLOCK = REPO / "deploy" / "nginx.conf"
GUNICORN_CONFIG = REPO / "deploy" / "gunicorn.conf.py"


class Nginx:
    """nginx over the portal's document folder, with a generated config, as a child process."""

    def __init__(self, portal: Portal, directory: Path, port: int = NGINX_PORT) -> None:
        self.directory = directory
        self.port = port
        directory.mkdir(parents=True)
        front = directory / "front.conf"
        front.write_text(
            SERVER_BLOCK.read_text()
            .replace("@LISTEN@", f"127.0.0.1:{FRONT_PORT}")
            .replace("@PUBLISHED_DIR@", str(portal.work / "published"))
            .replace("@PORTAL@", f"127.0.0.1:{portal.port}")
        )
        self.config = directory / "nginx.conf"
        self.config.write_text(
            NGINX_CONF.format(dir=directory, port=port, root=portal.documents, front=front)
        )
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Nginx:
        command = ["nginx", "-p", str(self.directory), "-c", str(self.config),
                   "-e", str(self.directory / "error.log")]  # fmt: skip
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchFailure(f"nginx exited: {self.process.stderr.read().decode()}")
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise BenchFailure("nginx did not start within 20 s")

    def __exit__(self, *exc_info: object) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()  # the master stops its workers
            self.process.wait(timeout=30)


# The load generator


def run_wrk(url: str, *, encoding: str, connections: int, seconds: int) -> dict[str, Any]:
    command = ["wrk", "-t", str(min(connections, 2)), "-c", str(connections),
               "-d", f"{seconds}s", "--timeout", "10s", "--latency"]  # fmt: skip
    if encoding == "gzip":
        command += ["-H", "Accept-Encoding: gzip"]
    done = subprocess.run([*command, url], capture_output=True, text=True, check=False)
    check(done.returncode == 0, f"wrk failed: {done.stdout}{done.stderr}")
    return parse_wrk(done.stdout)


_DURATION = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}
_SIZE = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}


def parse_wrk(output: str) -> dict[str, Any]:
    """wrk's latency percentiles, request count, bytes and errors from its report."""

    def find(pattern: str) -> re.Match:
        match = re.search(pattern, output)
        check(match, f"wrk's report lacks {pattern!r}:\n{output}")
        return match

    def ms(value: str, unit: str) -> float:
        return float(value) * _DURATION[unit]

    p50 = find(r"\n\s+50%\s+([\d.]+)(us|ms|s|m)\b")
    p99 = find(r"\n\s+99%\s+([\d.]+)(us|ms|s|m)\b")
    total = find(r"(\d+) requests in ([\d.]+)(us|ms|s|m), ([\d.]+)(B|KB|MB|GB|TB) read")
    check("Non-2xx or 3xx responses" not in output, f"wrk saw error answers:\n{output}")
    errors = re.search(r"Socket errors: (.*)", output)
    check(errors is None, f"wrk saw socket errors: {errors and errors.group(1)}")
    requests = int(total.group(1))
    check(requests > 0, f"wrk completed no request:\n{output}")
    return {
        "p50_ms": round(ms(*p50.groups()), 3),
        "p99_ms": round(ms(*p99.groups()), 3),
        "requests": requests,
        "requests_per_second": round(requests / (ms(*total.group(2, 3)) / 1000), 1),
        "bytes_per_request": float(total.group(4)) * _SIZE[total.group(5)] / requests,
    }


def run_python(url: str, *, encoding: str, connections: int, seconds: int) -> dict[str, Any]:
    """The fallback client: one keep-alive connection per thread, each body read in full."""
    host, port_path = url.removeprefix("http://").split(":", 1)
    port, path = port_path.split("/", 1)
    headers = {"Accept-Encoding": "gzip"} if encoding == "gzip" else {}
    latencies: list[float] = []
    received = [0]
    failures: list[str] = []
    deadline = time.perf_counter() + seconds
    lock = threading.Lock()

    def client() -> None:
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        mine, size = [], 0
        try:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                connection.request("GET", "/" + path, headers=headers)
                response = connection.getresponse()
                body = response.read()
                mine.append((time.perf_counter() - started) * 1000)
                size += len(body)
                if response.status != 200:
                    failures.append(f"{response.status}")
                    return
        except (OSError, http.client.HTTPException) as error:
            failures.append(repr(error))
        finally:
            connection.close()
            with lock:
                latencies.extend(mine)
                received[0] += size

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    check(not failures, f"the client saw errors: {failures[:5]}")
    return {
        "p50_ms": round(percentile(latencies, 0.5), 3),
        "p99_ms": round(percentile(latencies, 0.99), 3),
        "requests": len(latencies),
        "requests_per_second": round(len(latencies) / elapsed, 1),
        "bytes_per_request": received[0] / len(latencies),
    }


# Checks before timing


def fetch_raw(url: str, encoding: str) -> tuple[bytes, httpx.Headers]:
    """The body exactly as sent (no transparent decoding), and the headers."""
    headers = {"Accept-Encoding": "gzip" if encoding == "gzip" else "identity"}
    with httpx.stream("GET", url, headers=headers, timeout=60) as response:
        body = b"".join(response.iter_raw())
    check(response.status_code == 200, f"{url} answered {response.status_code}")
    gzipped = response.headers.get("content-encoding") == "gzip"
    check(gzipped == (encoding == "gzip"), f"{url}: Content-Encoding for {encoding} is wrong")
    return body, response.headers


def check_page(content: bytes, size: int) -> None:
    """A urlset listing resources 0..size-1, in key order."""
    locs = [loc for loc, _ in url_entries(parse_document(content, "the page"))]
    check(len(locs) == size, f"the page lists {len(locs)} resources, expected {size}")
    check(locs == [resource_uri(n) for n in range(size)], "the page is not in key order")


def prepare(portal: Portal, size: int) -> dict[str, Any]:
    """Load the set, wait for its page, find the stored file, check both copies."""
    set_path = portal.create_set("serve")
    portal.load(set_path, size)
    portal.wait_for_resource_list(set_path, size)
    portal.wait_until_settled(set_path, size)
    url = f"{portal.base_url}/resourcesync/{set_path}/resourcelist-1.xml"
    body, headers = fetch_raw(url, "plain")
    etag = headers["etag"].strip('"')
    stored = portal.documents / set_path / f"resourcelist-1.{etag}.xml"
    check(stored.exists(), f"no stored file {stored} for ETag {etag}")
    content = stored.read_bytes()
    twin = stored.with_name(stored.name + ".gz").read_bytes()
    check(gzip.decompress(twin) == content, "the gzip twin does not match the page")
    check_page(content, size)
    page = {
        "gunicorn": url.replace(portal.base_url, f"http://127.0.0.1:{ALONE_PORT}"),
        "django": url.replace(portal.base_url, f"http://127.0.0.1:{ALONE_PORT}") + THROUGH_DJANGO,
        "front": url.replace(portal.base_url, f"http://127.0.0.1:{FRONT_PORT}"),
        "django_etag": headers["etag"],
        "nginx": f"http://127.0.0.1:{NGINX_PORT}/{stored.relative_to(portal.documents)}",
        "bytes": {"plain": len(content), "gzip": len(twin)},
        "content": {"plain": content, "gzip": twin},
    }
    check(body == content, "gunicorn's body differs from the stored file")
    return page


def start_alone(portal: Portal, url: str) -> None:
    """gunicorn as deployed without the front server, over the same portal; wait for `url`."""
    portal.start_gunicorn("alone", ALONE_PORT, "--config", str(GUNICORN_CONFIG))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        portal.check_worker()  # fails at once if it exited
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise BenchFailure(f"gunicorn with {GUNICORN_CONFIG.name} did not answer within 60 s")


# Main


def measure(page: dict[str, Any], args: argparse.Namespace, client) -> dict[str, Any]:
    """Alternate the servers within each round; keep every run."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for server in SERVERS:  # warm them up (page cache, every worker process)
        client(page[server], encoding="plain", connections=4, seconds=2)
    for number in range(args.rounds):
        for encoding in ENCODINGS:
            for connections in CONCURRENCIES:
                shift = number % len(SERVERS)
                for server in SERVERS[shift:] + SERVERS[:shift]:
                    result = client(
                        page[server], encoding=encoding, connections=connections,
                        seconds=args.duration,
                    )  # fmt: skip
                    expected = page["bytes"][encoding]
                    per_request = result.pop("bytes_per_request")
                    # wrk counts headers too, rounds its total to 3 figures, and counts
                    # the bytes of the answers still arriving when it stops (one at
                    # most per connection, not counted as requests).
                    cut_off = expected * connections / result["requests"]
                    check(
                        expected * 0.98 <= per_request <= expected * 1.02 + cut_off + 1024,
                        f"{server} sent {per_request:.0f} bytes a request, the page has {expected}",
                    )
                    key = f"{encoding}-c{connections}-{server}"
                    runs.setdefault(key, []).append(result)
                    log(f"round {number + 1} {key}: {result}")
    return runs


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summary = {}
    for key, results in runs.items():
        summary[key] = {
            name: round(statistics.median(result[name] for result in results), 3)
            for name in ("p50_ms", "p99_ms", "requests_per_second")
        }
    return summary


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    lines = []
    summary = results["summary"]
    for encoding in ENCODINGS:
        for connections in CONCURRENCIES:
            theirs = summary[f"{encoding}-c{connections}-nginx"]
            clients = "1 client" if connections == 1 else f"{connections} clients"
            for server, how in SERVED_BY.items():
                ours = summary[f"{encoding}-c{connections}-{server}"]
                ratio = ours["p50_ms"] / theirs["p50_ms"]
                lines.append(
                    row(
                        "4",
                        f"Serving a {results['size']:,}-entry page, {encoding}, {clients}, {how}",
                        f"p50 ≤ {GOAL_RATIO[server]}x nginx",
                        _describe(ours),
                        baseline="nginx " + _describe(theirs),
                        ratio=ratio,
                        met=ratio <= GOAL_RATIO[server],
                    )
                )
    return lines


SERVED_BY = {
    "front": "as deployed (deploy/nginx.conf in front)",
    "gunicorn": "gunicorn alone (public: from the published tree)",
    "django": "gunicorn alone, Django's view (protected sets, S3)",
}


def _describe(figures: dict[str, float]) -> str:
    return (
        f"p50 {figures['p50_ms']:.2f} ms, p99 {figures['p99_ms']:.2f} ms, "
        f"{figures['requests_per_second']:,.0f} req/s"
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    check(need_command("nginx", "nginx"), "nginx is missing and could not be installed")
    client = run_wrk if need_command("wrk", "wrk") else run_python
    results: dict[str, Any] = {
        "benchmark": "serve",
        "size": args.size,
        "duration_seconds": args.duration,
        "rounds": args.rounds,
        "client": "wrk" if client is run_wrk else "python",
        "started": now_iso(),
        "machine": machine(),
    }
    results["database_engine"] = database_name(args.postgres)
    with Portal(
        "serve",
        elasticsearch=args.elasticsearch,
        redis=args.redis,
        keep=args.keep,
        postgres=args.postgres,
    ) as portal:
        page = prepare(portal, args.size)
        start_alone(portal, page["gunicorn"])
        with Nginx(portal, portal.work / "nginx"):
            for encoding in ENCODINGS:
                for server in ("gunicorn", "django"):
                    body, headers = fetch_raw(page[server], encoding)
                    check(body == page["content"][encoding], f"{server}'s {encoding} body differs")
                    etag = page["django_etag"].removesuffix('"')
                    check(headers["etag"].startswith(etag), f"{server}: not Django's ETag")
                for server in ("nginx", "front"):
                    body, headers = fetch_raw(page[server], encoding)
                    check(body == page["content"][encoding], f"{server}'s {encoding} body differs")
                    check(
                        headers["etag"] != page["django_etag"] and "-" in headers["etag"],
                        f"{server} passed the request to Django (ETag {headers['etag']})",
                    )
            results["bytes"] = page["bytes"]
            results["runs"] = measure(page, args, client)
        results["peak_rss_mib"] = portal.peak_rss_mib()
    results["summary"] = summarise(results["runs"])
    results["rows"] = rows(results)
    return results


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=ENTRIES_PER_PAGE, help="entries (50,000)")
    parser.add_argument("--duration", type=int, default=10, help="seconds per timed run (10)")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the servers (3)")
    add_portal_arguments(parser)
    args = parser.parse_args(argv)
    if not 1 <= args.size <= ENTRIES_PER_PAGE:
        parser.error(f"--size must be 1 to {ENTRIES_PER_PAGE:,}: one page")
    if args.rounds < 1 or args.duration <= 0:
        parser.error("--rounds and --duration must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    finish(run(args), args.output, "serve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
