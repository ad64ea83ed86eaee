"""The harvester's side of WebSub: a callback server, and subscribing at the hub.

The server answers only on the callback's unguessable path: the hub's
verification GET only for an intent the harvester made (echoing
`hub.challenge`), and it queues each content
distribution whose `X-Hub-Signature` is the HMAC of the body under our
secret; anything else is acknowledged (WebSub §7.1: answer 2xx, then ignore)
and counted as rejected.
"""

from __future__ import annotations

import hashlib
import hmac
import queue
import secrets
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import httpx

from harvester.addresses import AddressPolicy, Refused, checked_transport
from harvester.config import HarvestConfig

SIGNATURE_METHODS = ("sha1", "sha256", "sha384", "sha512")


class SubscriptionError(Exception):
    """The hub refused the request, or never verified our intent."""


def signature_valid(secret: str, body: bytes, header: str | None) -> bool:
    method, _, digest = (header or "").partition("=")
    if method not in SIGNATURE_METHODS or not digest:
        return False
    expected = hmac.new(secret.encode(), body, getattr(hashlib, method)).hexdigest()
    return hmac.compare_digest(expected, digest.lower())


@dataclass
class CallbackState:
    """What the handler threads share with the follower."""

    secret: str
    max_bytes: int
    #: The unguessable end of the callback's path (`/websub/<token>`).
    path: str
    intents: dict[tuple[str, str], threading.Event] = field(default_factory=dict)
    notifications: queue.Queue[bytes] = field(default_factory=queue.Queue)
    rejected: int = 0
    denied: str = ""

    def expect(self, mode: str, topic: str) -> threading.Event:
        event = threading.Event()
        self.intents[(mode, topic)] = event
        return event


class CallbackHandler(BaseHTTPRequestHandler):
    state: CallbackState

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if not self._on_our_path():
            self._answer(404)
            return
        query = {key: values[0] for key, values in parse_qs(urlsplit(self.path).query).items()}
        mode, topic = query.get("hub.mode", ""), query.get("hub.topic", "")
        event = self.state.intents.get((mode, topic))
        if mode == "denied":
            self.state.denied = query.get("hub.reason", "no reason given")
            self._answer(200)
            return
        if event is None or "hub.challenge" not in query:
            self._answer(404)
            return
        # Confirmed before the answer leaves: whoever sees the hub's 200 must see it set.
        event.set()
        self._answer(200, query["hub.challenge"].encode())

    def do_POST(self) -> None:
        if not self._on_our_path():
            self._answer(404)
            return
        length = self._content_length()
        if length is None:
            return
        if length > self.state.max_bytes:
            self._answer(413)
            return
        body = self.rfile.read(length)
        if signature_valid(self.state.secret, body, self.headers.get("X-Hub-Signature")):
            self.state.notifications.put(body)
        else:
            self.state.rejected += 1
        self._answer(204)

    def _on_our_path(self) -> bool:
        """The unguessable path, or a proxy's path ending in it: others who reach the port
        know the (public) topic, and could confirm intents or report denials."""
        return urlsplit(self.path).path.endswith(self.state.path)

    def _content_length(self) -> int | None:
        """The body's length; None once answered (411 without one, 400 for a bad one:
        `int("-1")` made `read` take the body up to the end of the connection)."""
        header = self.headers.get("Content-Length")
        if header is None:
            self._answer(411)
            return None
        if not (header.isascii() and header.isdigit()):
            self._answer(400)
            return None
        return int(header)

    def _answer(self, status: int, body: bytes = b"") -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def callback_at(base: str, path: str) -> str:
    """The callback: the unguessable `path` after the base's own, the base's query kept
    (WebSub lets a callback carry one; the hub appends its parameters to it)."""
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}{path}"))


class CallbackServer:
    """Listens on the configured host and port under an unguessable path."""

    def __init__(self, config: HarvestConfig) -> None:
        path = f"/websub/{secrets.token_urlsafe(16)}"
        self.state = CallbackState(secrets.token_urlsafe(32), config.max_document_bytes, path=path)
        handler = type("Handler", (CallbackHandler,), {"state": self.state})
        self._server = ThreadingHTTPServer((config.callback_host, config.callback_port), handler)
        self._server.daemon_threads = True
        port = self._server.server_port
        base = config.callback_url or f"http://{config.callback_host}:{port}"
        self.url = callback_at(base, path)

    def __enter__(self) -> CallbackServer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def ask_hub(
    hub: str,
    mode: str,
    *,
    topic: str,
    server: CallbackServer,
    lease_seconds: int,
    token: str | None,
    timeout: float,
    policy: AddressPolicy,
) -> None:
    """Subscribe or unsubscribe, and wait until the hub has verified it with us."""
    verified = server.state.expect(mode, topic)
    form = {
        "hub.mode": mode,
        "hub.topic": topic,
        "hub.callback": server.url,
        "hub.secret": server.state.secret,
        "hub.lease_seconds": str(lease_seconds),
    }
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(transport=checked_transport(policy, httpx.Limits())) as http:
            response = http.post(hub, data=form, headers=headers, timeout=timeout)
    except (httpx.HTTPError, Refused) as error:
        raise SubscriptionError(f"the hub {hub} did not answer: {error}") from error
    if response.status_code != 202:
        raise SubscriptionError(
            f"the hub {hub} refused to {mode}: HTTP {response.status_code} {response.text.strip()}"
        )
    if not verified.wait(timeout):
        reason = server.state.denied or f"no verification within {timeout:.0f} s"
        raise SubscriptionError(f"the hub {hub} did not verify our intent to {mode}: {reason}")
