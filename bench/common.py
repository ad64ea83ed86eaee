"""What the HTTP benchmarks share: the portal under test, generated events, figures.

`Portal` runs the portal as it is deployed (gunicorn, a Celery worker,
Elasticsearch, Redis) over a fresh DATA_DIR under bench/work/ (git-ignored),
on its own port, its own index prefix and its own Redis database, so a test
suite or dev server running beside it is never touched. Its database is a
SQLite file in that folder or, with `--postgres URL`, a fresh database created
on that PostgreSQL server for the run and dropped after it. The scripts talk to
it over HTTP only, as the harvester and destinations do.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from lxml import etree

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "bench" / "work"
RESULTS = REPO / "bench" / "results"
BIN = Path(sys.executable).parent
#: Set by bench/run.py: the folder its scripts move their finished work folders
#: into, deleted once the whole run is over (see `remove_work`).
SET_ASIDE = "BENCH_SET_ASIDE"

DEFAULT_ELASTICSEARCH = "http://127.0.0.1:9260"
DEFAULT_REDIS = "redis://127.0.0.1:6399/1"
#: BENCH_PORTAL_PORT moves the portal under test (several benchmarks on one machine).
PORTAL_PORT = int(os.environ.get("BENCH_PORTAL_PORT", "8060"))
#: item 4's servers on the next three ports (8061 to 8063 by default), so they move with it.
NGINX_PORT = PORTAL_PORT + 1
#: nginx with deploy/nginx.conf in front of the portal, as deployed.
FRONT_PORT = PORTAL_PORT + 2
#: gunicorn with deploy/gunicorn.conf.py, as deployed without the front server.
ALONE_PORT = PORTAL_PORT + 3

PROVIDER = "bench"
URL_PREFIX = "http://data.example.org/bench/"
ENTRIES_PER_PAGE = 50_000  # the set's default entries_per_document
SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
RS = "{http://www.openarchives.org/rs/terms/}"


class BenchFailure(AssertionError):
    """The run went wrong: no figure from it may be reported."""


def check(condition: object, message: str) -> None:
    if not condition:
        raise BenchFailure(message)


def log(message: str) -> None:
    """Progress goes to stderr; stdout ends with the figures."""
    print(f"  {message}", file=sys.stderr, flush=True)


def remove_work(work: Path) -> None:
    """Delete a finished work folder, or move it aside when a full run asks (SET_ASIDE).

    This machine's ext4 has no journal, and without one a freed inode is not
    reused for a minute (six while its inode-table block is dirty): every new
    file in its block group scans past it (`recently_deleted` in the kernel's
    `find_inode_bit`, 92% of a create's time in `perf`). After 100,000 files
    were deleted, the next ones were created 10-20x slower for minutes, so a
    benchmark of file creation must not follow another's deletion.
    """
    aside = os.environ.get(SET_ASIDE)
    if not aside:
        shutil.rmtree(work, ignore_errors=True)
        return
    Path(aside).mkdir(parents=True, exist_ok=True)
    work.rename(Path(aside) / work.name)


# Figures


def percentile(values: list[float], fraction: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    check(values, "no values to take a percentile of")
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": sys.version.split()[0], "load": load_average()}


def peak_rss_mib(pid: int) -> float:
    """Peak resident memory (VmHWM) of one live process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise BenchFailure(f"no VmHWM for process {pid}")


def process_tree(pid: int) -> list[int]:
    """A process and its descendants (gunicorn's workers, Celery's pool)."""
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        for child in children:
            pids.extend(process_tree(int(child)))
    return pids


def row(
    item: str,
    figure: str,
    goal: str,
    measured: str,
    *,
    baseline: str = "",
    ratio: float | None = None,
    met: bool | None = None,
) -> dict[str, Any]:
    """One line of the results table; `met` is None where there is no goal to meet."""
    return {
        "item": item,
        "figure": figure,
        "goal": goal,
        "measured": measured,
        "baseline": baseline,
        "ratio": None if ratio is None else round(ratio, 2),
        "met": met,
    }


def finish(results: dict[str, Any], output: Path | None, name: str) -> None:
    """Write the results JSON and print the figures as the script's last lines."""
    results["finished"] = now_iso()
    output = output or RESULTS / f"{name}-{datetime.now():%Y-%m-%dT%H%M%S}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2) + "\n")
    for line in results["rows"]:
        verdict = {True: "met", False: "MISSED", None: ""}[line["met"]]
        ratio = f"  ratio {line['ratio']}" if line["ratio"] is not None else ""
        baseline = f"  (baseline {line['baseline']})" if line["baseline"] else ""
        print(
            f"{line['figure']}: {line['measured']}{baseline}{ratio}  goal {line['goal']} {verdict}"
        )
    print(f"results: {output}")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# Events as the harvester posts them


FIRST_LASTMOD = datetime(2020, 1, 1, tzinfo=UTC)
MIMES = ("text/plain", "application/pdf", "image/jpeg", "text/html; charset=utf-8")


def resource_uri(n: int) -> str:
    return f"{URL_PREFIX}r/{n:07d}"


def resource_md5(n: int, version: int) -> str:
    return hashlib.md5(f"{n} v{version}".encode(), usedforsecurity=False).hexdigest()


def event(n: int, change: str = "created", version: int = 1, *, tag: str = "") -> dict[str, Any]:
    """One event for resource n; version 1 is its creation, each update adds one."""
    uri = resource_uri(n)
    if change == "deleted":
        return {"change": change, "location": {"type": "url", "value": uri}, "id": f"{tag}{n}-d"}
    lastmod = FIRST_LASTMOD + timedelta(seconds=n * 37 + version * 86_400)
    return {
        "change": change,
        "location": {"type": "url", "value": uri},
        "length": 1_000 + (n * 7_919 + version) % 1_000_000,
        "md5": resource_md5(n, version),
        "mime": MIMES[n % len(MIMES)],
        "lastmod": lastmod.isoformat().replace("+00:00", "Z"),
        "ln": [{"rel": "describedby", "href": {"type": "url", "value": uri + ".xml"},
                "mime": "application/xml"}],
        "id": f"{tag}{n}-v{version}",
    }  # fmt: skip


def ndjson(events: Iterator[dict[str, Any]] | list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(item, separators=(",", ":")).encode() + b"\n" for item in events)


# Documents as destinations read them


def parse_document(content: bytes, what: str) -> etree._Element:
    try:
        return etree.fromstring(content)
    except etree.XMLSyntaxError as error:
        raise BenchFailure(f"{what} is not well-formed XML: {error}") from None


def sitemap_locs(root: etree._Element) -> list[str]:
    return [loc.text for loc in root.iter(f"{SM}loc")]


def url_entries(root: etree._Element) -> list[tuple[str, str]]:
    """(loc, rs:md hash) of every <url> of a urlset."""
    check(root.tag == f"{SM}urlset", f"expected a urlset, got {root.tag}")
    entries = []
    for url in root.iter(f"{SM}url"):
        md = url.find(f"{RS}md")
        entries.append((url.findtext(f"{SM}loc"), md.get("hash", "") if md is not None else ""))
    return entries


# The database under test


def add_database_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="a PostgreSQL server (postgres://user@host:port/db) to create this run's database "
        "on, dropped after it; default: a SQLite file in the work folder",
    )


def database_name(url: str | None) -> str:
    """`sqlite` or `postgres`, as the results name the database under test."""
    return "postgres" if url else "sqlite"


def create_database(server: str, name: str) -> str:
    """A fresh, empty database on a PostgreSQL server; returns its URL.

    A killed run may have left one of the same name: it is dropped first.
    """
    import psycopg
    from psycopg import sql

    with psycopg.connect(server, autocommit=True) as admin:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        admin.execute(drop.format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return urlunsplit(urlsplit(server)._replace(path=f"/{name}"))


def drop_database(server: str, url: str) -> None:
    """Drop a database made by create_database, closing what is still connected to it."""
    import psycopg
    from psycopg import sql

    name = urlsplit(url).path.lstrip("/")
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(drop.format(sql.Identifier(name)))


@contextmanager
def database_url(work: Path, postgres: str | None, name: str, *, keep: bool) -> Iterator[str]:
    """DATABASE_URL for one run: a SQLite file in `work`, or a fresh PostgreSQL database."""
    if not postgres:
        yield f"sqlite:///{work / 'db.sqlite3'}"
        return
    url = create_database(postgres, f"bench_{name}_{os.getpid()}")
    try:
        yield url
    finally:
        if keep:
            log(f"database kept: {url}")
        else:
            from django.db import connections

            connections.close_all()
            drop_database(postgres, url)


def add_portal_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of every benchmark that runs the portal (common.Portal)."""
    parser.add_argument("--elasticsearch", default=DEFAULT_ELASTICSEARCH, metavar="URL")
    parser.add_argument("--redis", default=DEFAULT_REDIS, metavar="URL", help="Celery broker")
    add_database_argument(parser)
    parser.add_argument("--output", type=Path, help="results JSON (bench/results/...)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder and indices")


# The portal under test


class Portal:
    """gunicorn and a Celery worker over a fresh DATA_DIR, stopped (and removed) on exit."""

    def __init__(
        self,
        name: str,
        *,
        elasticsearch: str,
        redis: str,
        port: int = PORTAL_PORT,
        workers: int = 4,
        keep: bool = False,
        postgres: str | None = None,
        generator: str = "elasticsearch",
    ) -> None:
        self.name = name
        #: With "database", the portal reads its own tables: no mirror to wait for.
        self.mirrored = generator == "elasticsearch"
        self.postgres = postgres
        self.elasticsearch = elasticsearch.rstrip("/")
        self.redis = redis
        self.port = port
        self.workers = workers
        self.keep = keep
        self.work = WORK / f"{name}-{datetime.now():%Y%m%dT%H%M%S}-{os.getpid()}"
        self.index_prefix = f"bench-{name}"
        self.base_url = f"http://127.0.0.1:{port}"
        self.token = ""
        self.processes: dict[str, subprocess.Popen] = {}
        self.worker_log_read = 0
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "RESOURCESYNC_STORAGE_BACKEND"},
            "DJANGO_SETTINGS_MODULE": "resourcesync_portal.settings",
            "DATA_DIR": str(self.work),
            "DATABASE_URL": f"sqlite:///{self.work / 'db.sqlite3'}",
            "ELASTICSEARCH_URL": self.elasticsearch,
            "ELASTICSEARCH_INDEX_PREFIX": self.index_prefix,
            "CELERY_BROKER_URL": redis,
            "SECRET_KEY": "bench-not-secret-" + "x" * 40,
            "DEBUG": "0",
            "SECURE_SSL_REDIRECT": "0",
            "SECURE_HSTS_SECONDS": "0",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "PUBLIC_BASE_URL": self.base_url,
            "API_THROTTLE_RATE": "100000000/hour",
            "LOG_LEVEL": "WARNING",
        }
        if not self.mirrored:
            del self.env["ELASTICSEARCH_URL"]

    @property
    def documents(self) -> Path:
        return self.work / "documents"

    def __enter__(self) -> Portal:
        try:
            self.start()
        except BaseException:
            self.stop(failed=True)
            raise
        return self

    def __exit__(self, exc_type: type | None, *exc_info: object) -> None:
        # An interrupted run is not a broken one: only failures keep the work folder.
        interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt | SystemExit)
        self.stop(failed=exc_type is not None and not interrupted)

    def start(self) -> None:
        check(not self._answers(), f"something already answers on port {self.port}")
        self._check_services()
        self._clear_services()
        self.work.mkdir(parents=True)
        if self.postgres:
            self.env["DATABASE_URL"] = create_database(
                self.postgres, f"bench_{self.name}_{os.getpid()}"
            )
        # SIGTERM (a CI timeout, `kill`) must still stop the servers below.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        self.manage("migrate", "--verbosity", "0")
        # As the README's production steps do: indices exist before any event.
        if self.mirrored:
            self.manage("search_index", "--create", "-f")
        self._spawn(
            "celery",
            [str(BIN / "celery"), "-A", "resourcesync_portal", "worker", "--loglevel", "INFO",
             "--concurrency", "2", "--without-gossip", "--without-mingle", "--without-heartbeat",
             "--hostname", f"bench-{self.name}@%h", "--logfile", str(self.work / "celery.log")],
        )  # fmt: skip
        # As behind deploy/nginx.conf: sync workers (README, Production).
        self.start_gunicorn(
            "gunicorn", self.port, "--workers", str(self.workers), "--timeout", "300"
        )
        self._wait_ready()
        log(f"portal {self.name}: {self.base_url}, data in {self.work}")

    def start_gunicorn(self, name: str, port: int, *options: str) -> None:
        """One more gunicorn over this portal (`options`, e.g. a config file), on `port`.

        Stopped with the others; `_wait_ready` or the caller waits for it to answer.
        """
        self._spawn(
            name,
            [str(BIN / "gunicorn"), "resourcesync_portal.wsgi", *options,
             "--bind", f"127.0.0.1:{port}", "--error-logfile", str(self.work / f"{name}.log")],
        )  # fmt: skip

    def _spawn(self, name: str, command: list[str]) -> None:
        with open(self.work / f"{name}.out", "wb") as out:
            self.processes[name] = subprocess.Popen(
                command, cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def _answers(self) -> bool:
        try:
            httpx.get(f"{self.base_url}/api/v1/sets/", timeout=1)
        except httpx.HTTPError:
            return False
        return True

    def check_worker(self) -> None:
        """Fail at once if a Celery task failed for good: its work will never be done."""
        with (self.work / "celery.log").open("rb") as worker_log:
            worker_log.seek(self.worker_log_read)
            new = worker_log.read()
        self.worker_log_read += len(new)
        failures = [line for line in new.decode(errors="replace").splitlines()
                    if "raised unexpected" in line]  # fmt: skip
        if failures:
            raise BenchFailure(f"a Celery task failed: {failures[0][:500]}")
        for name, process in self.processes.items():
            check(process.poll() is None, f"{name} exited ({process.returncode}); see {self.work}")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 120
        celery_log = self.work / "celery.log"
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise BenchFailure(f"{name} exited ({process.returncode}); see {self.work}")
            worker_ready = celery_log.exists() and " ready." in celery_log.read_text()
            if worker_ready and self._answers():
                return
            time.sleep(0.2)
        raise BenchFailure(f"the portal did not start within 120 s; see {self.work}")

    def _check_services(self) -> None:
        try:
            if self.mirrored:
                httpx.get(f"{self.elasticsearch}/_cluster/health", timeout=5).raise_for_status()
        except httpx.HTTPError as error:
            raise BenchFailure(
                f"no Elasticsearch at {self.elasticsearch} ({error}); bench/run.py starts one"
            ) from None
        import redis

        try:
            redis.Redis.from_url(self.redis).ping()
        except redis.RedisError as error:
            raise BenchFailure(
                f"no Redis at {self.redis} ({error}); bench/run.py starts one"
            ) from None

    def _clear_services(self) -> None:
        """Drop this portal's indices and queued tasks (a killed run may have left some)."""
        import redis

        if self.mirrored:
            httpx.delete(f"{self.elasticsearch}/{self.index_prefix}-*", timeout=60)
        redis.Redis.from_url(self.redis).flushdb()

    def stop(self, *, failed: bool = False) -> None:
        """Stop the servers; remove the work folder and indices unless kept or failed."""
        for name in sorted(self.processes, key=lambda name: name == "celery"):  # web first
            process = self.processes.pop(name, None)
            if process is None:
                continue
            # Their own sessions: the signal reaches gunicorn's workers and Celery's pool,
            # even if the parent is already gone.
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=30)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if failed and self.work.exists():
            log(f"work folder kept for inspection: {self.work} ({self.env['DATABASE_URL']})")
        elif not self.keep:
            try:
                self._clear_services()
            except Exception as error:  # the services may be what failed
                log(f"could not clear the indices and queue: {error}")
            remove_work(self.work)
            self._drop_database()

    def _drop_database(self) -> None:
        url = self.env["DATABASE_URL"]
        if self.postgres and not url.startswith("sqlite"):
            try:
                drop_database(self.postgres, url)
            except Exception as error:  # the server may be what failed
                log(f"could not drop {url}: {error}")

    def manage(self, *args: str) -> str:
        """Run a management command against this portal's database; return its stdout."""
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=REPO, env=self.env, capture_output=True,
            text=True, check=False,
        )  # fmt: skip
        if done.returncode:
            raise BenchFailure(f"manage.py {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout.strip()

    def create_set(self, slug: str) -> str:
        """A public set with the default capability settings; returns `provider/set`.

        The first set also creates the provider and its API token.
        """
        self.manage("create_resource_set", PROVIDER, slug, "--url-prefix", URL_PREFIX)
        if not self.token:
            self.token = self.manage("create_api_token", PROVIDER, "--name", "bench")
        return f"{PROVIDER}/{slug}"

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=600, **kwargs)

    def post_events(self, client: httpx.Client, set_path: str, body: bytes) -> dict[str, int]:
        """POST one NDJSON body; anything but 200 fails the run."""
        response = client.post(
            f"/api/v1/sets/{set_path}/events",
            content=body,
            headers={
                "Authorization": f"Token {self.token}",
                "Content-Type": "application/x-ndjson",
            },
        )
        check(
            response.status_code == 200,
            f"ingest answered {response.status_code}: {response.text[:500]}",
        )
        return response.json()

    def es_count(self, kind: str, set_path: str) -> int:
        """Documents of one set in this portal's `resources` or `changes` index."""
        response = httpx.post(
            f"{self.elasticsearch}/{self.index_prefix}-{kind}/_count",
            json={"query": {"term": {"resource_set": set_path}}},
            timeout=30,
        )
        if response.status_code == 404:  # not created before the first indexing
            return 0
        response.raise_for_status()
        return response.json()["count"]

    def es_resource(self, set_path: str, uri: str) -> dict[str, Any] | None:
        response = httpx.post(
            f"{self.elasticsearch}/{self.index_prefix}-resources/_search",
            json={"query": {"bool": {"filter": [{"term": {"resource_set": set_path}},
                                                {"term": {"uri": uri}}]}}},
            timeout=30,
        )  # fmt: skip
        response.raise_for_status()
        hits = response.json()["hits"]["hits"]
        return hits[0]["_source"] if hits else None

    def peak_rss_mib(self) -> dict[str, float]:
        """Peak RSS of the largest gunicorn and Celery process so far."""
        peaks = {}
        for name, process in self.processes.items():
            peaks[name] = max(peak_rss_mib(pid) for pid in process_tree(process.pid))
        return peaks

    def load(self, set_path: str, size: int, *, batch: int = 10_000, tag: str = "seed") -> None:
        """Create resources 0..size-1 through the API (not timed)."""
        with self.client() as client:
            for start in range(0, size, batch):
                body = ndjson(event(n, tag=tag) for n in range(start, min(start + batch, size)))
                counts = self.post_events(client, set_path, body)
                check(counts["created"] == min(batch, size - start), f"seeding: {counts}")

    def wait_for_resource_list(self, set_path: str, size: int, *, timeout: float = 900) -> float:
        """Wait until the set's Resource List lists `size` entries; return the seconds waited."""
        started = time.monotonic()
        pages = max(1, math.ceil(size / ENTRIES_PER_PAGE))
        last_entries = size - ENTRIES_PER_PAGE * (pages - 1)
        with self.client() as client:
            while time.monotonic() - started < timeout:
                if self._resource_list_has(client, set_path, pages, last_entries):
                    return time.monotonic() - started
                self.check_worker()
                time.sleep(0.25)
        raise BenchFailure(f"{set_path}: the Resource List did not reach {size} entries")

    def wait_until_settled(self, set_path: str, changes: int, *, quiet: float = 5) -> None:
        """Wait until every change is indexed and the documents stop changing.

        A regeneration that ran before the last changes were indexed schedules
        another; a benchmark that reads a stored file must not race it.
        """
        deadline = time.monotonic() + 900
        while self.mirrored and self.es_count("changes", set_path) < changes:
            check(time.monotonic() < deadline, f"{set_path}: changes not indexed after 900 s")
            self.check_worker()
            time.sleep(0.2)
        names = ("resourcelist.xml", "changelist.xml")
        with self.client() as client:
            last, since = None, time.monotonic()
            while time.monotonic() - since < quiet:
                check(time.monotonic() < deadline, f"{set_path}: documents still changing")
                etags = [
                    client.head(f"/resourcesync/{set_path}/{name}").headers.get("etag")
                    for name in names
                ]
                if etags != last:
                    last, since = etags, time.monotonic()
                self.check_worker()
                time.sleep(0.2)

    def _resource_list_has(
        self, client: httpx.Client, set_path: str, pages: int, last_entries: int
    ) -> bool:
        response = client.get(f"/resourcesync/{set_path}/resourcelist.xml")
        if response.status_code == 404:
            return False
        check(response.status_code == 200, f"resourcelist.xml answered {response.status_code}")
        root = parse_document(response.content, "resourcelist.xml")
        if pages == 1:
            return root.tag == f"{SM}urlset" and len(url_entries(root)) == last_entries
        if root.tag != f"{SM}sitemapindex" or len(locs := sitemap_locs(root)) != pages:
            return False
        last = client.get(locs[-1].removeprefix(self.base_url))
        if last.status_code != 200:
            return False
        return len(url_entries(parse_document(last.content, locs[-1]))) == last_entries


def need_command(command: str, package: str) -> bool:
    """Install a Debian package for a missing command (as root); False if still missing."""
    if shutil.which(command):
        return True
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return False
    log(f"installing {package} with apt-get (for {command})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", package]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
    if subprocess.run(install, check=False, **quiet).returncode:
        subprocess.run(["apt-get", "update", "-q"], check=False, **quiet)
        subprocess.run(install, check=False, **quiet)
    return shutil.which(command) is not None
