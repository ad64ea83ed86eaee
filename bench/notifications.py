"""Notifications: from a posted event to a subscriber holding the file, and fan-out.

    .venv/bin/python bench/notifications.py [--samples 20] [--subscribers 100]
        [--elasticsearch URL] [--redis URL] [--postgres URL] [--output FILE] [--keep]

The portal runs as deployed (gunicorn, a Celery worker, Redis: common.Portal)
with the default notification settings, except that its hub may call back to
loopback (RESOURCESYNC_ALLOWED_CALLBACK_NETWORKS=127.0.0.0/8), where this
script's subscribers listen. Its database is a SQLite file in the work
folder or, with --postgres, a fresh database on that server. The set's
resources are real files the portal serves at /files/.

1. Latency: one subscriber, subscribed through the Capability List's hub with
   a secret. --samples times a file is written and its event posted; the
   subscriber checks each delivery's signature, GETs every resource it names
   and checks its md5. The figure is the time from sending the POST to the
   subscriber holding the file (goal: median <= 1 s).
2. Fan-out: --subscribers more callbacks subscribe to the same topic; one
   event is posted; the figure is the time from the POST until every
   subscriber has received its signed notification (goal: all within 2 s).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from lxml import etree

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    PROVIDER,
    RS,
    SM,
    Portal,
    add_portal_arguments,
    check,
    database_name,
    finish,
    machine,
    ndjson,
    now_iso,
    row,
)

LATENCY_GOAL = 1.0
FANOUT_GOAL = 2.0
SECRET = "bench secret"  # noqa: S105 (a test subscriber's)
TIMEOUT = 60


class Callbacks:
    """Many subscribers on one loopback server, one path each; what each received, when."""

    def __init__(self, fetch_files: bool) -> None:
        self.fetch_files = fetch_files
        self.verified: set[str] = set()
        self.arrivals: dict[str, float] = {}  # "<path> <loc>" -> monotonic time
        self.bad_signatures = 0
        self.changed = threading.Condition()
        self.http = httpx.Client(timeout=30)
        callbacks = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query)
                challenge = query.get("hub.challenge", [""])[0].encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(challenge)))
                self.end_headers()
                self.wfile.write(challenge)
                with callbacks.changed:
                    callbacks.verified.add(urlsplit(self.path).path)
                    callbacks.changed.notify_all()

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(204)
                self.end_headers()
                callbacks.received(urlsplit(self.path).path, body, self.headers)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def received(self, path: str, body: bytes, headers: Any) -> None:
        expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, headers.get("X-Hub-Signature", "")):
            self.bad_signatures += 1
            return
        for url in etree.fromstring(body).iter(f"{SM}url"):
            loc = url.findtext(f"{SM}loc")
            md5 = url.find(f"{RS}md").get("hash", "").removeprefix("md5:").split()[0:1]
            if self.fetch_files and md5:
                content = self.http.get(loc).content
                check(
                    hashlib.md5(content, usedforsecurity=False).hexdigest() == md5[0],
                    f"{loc}: md5 differs",
                )
            with self.changed:
                self.arrivals[f"{path} {loc}"] = time.monotonic()
                self.changed.notify_all()

    def wait(self, condition, what: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        with self.changed:
            while not condition():
                check(time.monotonic() < deadline, f"timed out waiting for {what}")
                self.changed.wait(0.5)

    def close(self) -> None:
        self.server.shutdown()
        self.http.close()


def discover(portal: Portal, set_path: str) -> tuple[str, str]:
    content = httpx.get(f"{portal.base_url}/resourcesync/{set_path}/capabilitylist.xml").content
    for url in etree.fromstring(content).iter(f"{SM}url"):
        if url.find(f"{RS}md").get("capability") == "change-notification":
            return url.findtext(f"{SM}loc"), url.find(f"{RS}ln").get("href")
    raise AssertionError("no change-notification topic in the Capability List")


def subscribe(callbacks: Callbacks, hub: str, topic: str, paths: list[str]) -> None:
    with httpx.Client(timeout=30) as client:
        for path in paths:
            form = {
                "hub.mode": "subscribe",
                "hub.topic": topic,
                "hub.callback": callbacks.base + path,
                "hub.secret": SECRET,
            }
            response = client.post(hub, data=form)
            check(response.status_code == 202, f"subscribe: {response.status_code} {response.text}")
    callbacks.wait(lambda: set(paths) <= callbacks.verified, "the hub to verify the subscribers")


def file_event(root: Path, name: str, content: bytes) -> dict[str, Any]:
    path = root / name
    path.write_bytes(content)
    return {
        "change": "created",
        "location": {"type": "abs_path", "value": str(path)},
        "length": len(content),
        "md5": hashlib.md5(content, usedforsecurity=False).hexdigest(),
        "mime": "text/plain",
        "lastmod": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
    }


def create_set(portal: Portal, root: Path) -> str:
    slug = "notify"
    portal.manage(
        "create_resource_set", PROVIDER, slug,
        "--url-prefix", f"{portal.base_url}/files/{PROVIDER}/{slug}/",
        "--resource-root", str(root),
    )  # fmt: skip
    portal.token = portal.manage("create_api_token", PROVIDER, "--name", "bench")
    portal.manage(
        "shell", "-c",
        "from sources.models import CapabilitySettings as C, ResourceSet as S; "
        f"C.objects.update_or_create(resource_set=S.objects.get(slug='{slug}'), "
        "defaults={'publish_notifications': True})",
    )  # fmt: skip
    return f"{PROVIDER}/{slug}"


def latency(
    portal: Portal, set_path: str, root: Path, samples: int, callbacks: Callbacks
) -> list[float]:
    times = []
    with portal.client() as client:
        for number in range(samples):
            body = ndjson(
                [file_event(root, f"latency-{number}.txt", f"sample {number}\n".encode())]
            )
            started = time.monotonic()
            portal.post_events(client, set_path, body)
            loc = f"{portal.base_url}/files/{set_path}/latency-{number}.txt"
            key = f"/follower {loc}"
            callbacks.wait(lambda key=key: key in callbacks.arrivals, f"sample {number}")
            times.append(callbacks.arrivals[key] - started)
            portal.check_worker()
            time.sleep(0.3)
    return times


def fanout(
    portal: Portal, set_path: str, root: Path, paths: list[str], callbacks: Callbacks
) -> float:
    with portal.client() as client:
        body = ndjson([file_event(root, "fanout.txt", b"to every subscriber\n")])
        started = time.monotonic()
        portal.post_events(client, set_path, body)
    loc = f"{portal.base_url}/files/{set_path}/fanout.txt"
    keys = [f"{path} {loc}" for path in paths]
    callbacks.wait(lambda: all(key in callbacks.arrivals for key in keys), "every subscriber")
    return max(callbacks.arrivals[key] for key in keys) - started


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "benchmark": "notifications",
        "started": now_iso(),
        "machine": machine(),
        "database_engine": database_name(args.postgres),
    }
    portal = Portal(
        "notifications",
        elasticsearch=args.elasticsearch,
        redis=args.redis,
        keep=args.keep,
        postgres=args.postgres,
    )
    portal.env["RESOURCESYNC_ALLOWED_CALLBACK_NETWORKS"] = "127.0.0.0/8"
    with portal:
        root = portal.work / "files"
        root.mkdir()
        set_path = create_set(portal, root)
        topic, hub = discover(portal, set_path)
        follower = Callbacks(fetch_files=True)
        crowd = Callbacks(fetch_files=False)
        try:
            subscribe(follower, hub, topic, ["/follower"])
            times = latency(portal, set_path, root, args.samples, follower)
            paths = [f"/s{n}" for n in range(args.subscribers)]
            subscribe(crowd, hub, topic, paths)
            spread = fanout(portal, set_path, root, paths, crowd)
            check(not (follower.bad_signatures or crowd.bad_signatures), "a bad signature arrived")
        finally:
            follower.close()
            crowd.close()
    median = statistics.median(times)
    results.update(
        samples=[round(t, 3) for t in times],
        latency_median_seconds=round(median, 3),
        latency_max_seconds=round(max(times), 3),
        subscribers=args.subscribers,
        fanout_seconds=round(spread, 3),
        rows=[
            row(
                "14",
                "POST /events -> subscriber holds the file (median)",
                f"<= {LATENCY_GOAL:.0f} s",
                f"{median:.3f} s (max {max(times):.3f} s)",
                met=median <= LATENCY_GOAL,
            ),
            row(
                "14",
                f"POST /events -> all {args.subscribers} subscribers notified",
                f"<= {FANOUT_GOAL:.0f} s",
                f"{spread:.3f} s",
                met=spread <= FANOUT_GOAL,
            ),
        ],
    )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--subscribers", type=int, default=100)
    add_portal_arguments(parser)
    args = parser.parse_args()
    results = run(args)
    finish(results, args.output, "notifications")


if __name__ == "__main__":
    main()
