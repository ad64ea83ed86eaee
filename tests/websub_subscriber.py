"""A WebSub subscriber written from the W3C Recommendation and ResourceSync's
Change Notification spec, independent of the portal's and the harvester's code.

It discovers the hub and topic in a Capability List (`rs:ln rel="hub"` on the
`change-notification` entry), subscribes with a form POST, answers the hub's
verification GET by echoing `hub.challenge` for intents it made, and accepts
content distribution POSTs, checking `X-Hub-Signature` (sha256 HMAC) against
its secret. `answer` decides each POST's status (or, with `hang`, it waits
past the hub's timeout without answering).
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from lxml import etree

NS = {
    "sm": "http://www.sitemaps.org/schemas/sitemap/0.9",
    "rs": "http://www.openarchives.org/rs/terms/",
}


def discover(capability_list: bytes, capability: str = "change-notification") -> tuple[str, str]:
    """(topic, hub) of a notification entry of a Capability List."""
    root = etree.fromstring(capability_list)
    for url in root.findall("sm:url", NS):
        md = url.find("rs:md", NS)
        if md is not None and md.get("capability") == capability:
            hub = url.find("rs:ln[@rel='hub']", NS)
            assert hub is not None, "a notification entry names its hub"
            return url.findtext("sm:loc", namespaces=NS), hub.get("href")
    raise AssertionError(f"no {capability} entry in the Capability List")


@dataclass
class Received:
    body: bytes
    headers: dict[str, str]
    signature_valid: bool | None  # None: no secret, so no signature expected


@dataclass
class Subscriber:
    """The callback server's state; `url` is the callback."""

    secret: str = ""
    #: status for each POST, in order; the last one repeats
    answers: list[int] = field(default_factory=lambda: [200])
    hang: float = 0.0
    verify: bool = True
    intents: set[tuple[str, str]] = field(default_factory=set)  # (mode, topic)
    verifications: list[dict[str, str]] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    #: (method, path with its query) of every request, as it arrived
    requests: list[tuple[str, str]] = field(default_factory=list)
    attempts: int = 0
    url: str = ""
    _server: ThreadingHTTPServer | None = None
    _arrived: threading.Condition = field(default_factory=threading.Condition)

    def intend(self, mode: str, topic: str) -> None:
        self.intents.add((mode, topic))

    def signature_ok(self, body: bytes, header: str | None) -> bool | None:
        if not self.secret:
            return None
        if not header or "=" not in header:
            return False
        method, _, digest = header.partition("=")
        if method not in ("sha1", "sha256", "sha384", "sha512"):
            return False
        expected = hmac.new(self.secret.encode(), body, getattr(hashlib, method)).hexdigest()
        return hmac.compare_digest(expected, digest)

    def wait_for(self, count: int, timeout: float = 10) -> list[Received]:
        """Block until `count` valid notifications arrived (WebSub: ignore bad signatures)."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while len(self.accepted) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(self.accepted)} of {count} notifications arrived")
                self._arrived.wait(left)
        return self.accepted

    @property
    def accepted(self) -> list[Received]:
        return [item for item in self.received if item.signature_valid is not False]

    def start(self, path: str = "/callback") -> Subscriber:
        subscriber = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                subscriber.requests.append(("GET", self.path))
                query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
                subscriber.verifications.append(query)
                intent = (query.get("hub.mode", ""), query.get("hub.topic", ""))
                if not subscriber.verify or intent not in subscriber.intents:
                    self.send_response(404)
                    self.end_headers()
                    return
                body = query.get("hub.challenge", "").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                subscriber.requests.append(("POST", self.path))
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                position = min(subscriber.attempts, len(subscriber.answers) - 1)
                subscriber.attempts += 1
                if subscriber.hang:
                    time.sleep(subscriber.hang)
                status = subscriber.answers[position]
                if 200 <= status < 300:
                    valid = subscriber.signature_ok(body, self.headers.get("X-Hub-Signature"))
                    with subscriber._arrived:
                        subscriber.received.append(Received(body, dict(self.headers), valid))
                        subscriber._arrived.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_port}{path}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def subscribe_form(
    mode: str, topic: str, callback: str, *, secret: str = "", lease_seconds: int | None = None
) -> dict[str, str]:
    form = {"hub.mode": mode, "hub.topic": topic, "hub.callback": callback}
    if secret:
        form["hub.secret"] = secret
    if lease_seconds is not None:
        form["hub.lease_seconds"] = str(lease_seconds)
    return form


Post = Callable[[str, dict[str, str]], int]
