"""Requests to subscribers' callbacks that cannot be turned against the portal's network.

Only http(s); the host is resolved and every address it resolves to must be
public (or in ALLOWED_CALLBACK_NETWORKS), checked before every request and
again as a connection opens, which then goes to the checked address itself:
a DNS answer that changes in between changes nothing.
Redirects are not followed, at most MAX_RESPONSE_BYTES of an answer are read,
and the answer must arrive within CALLBACK_TIMEOUT of the request, however it trickles.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpcore
import httpx
from django.core.cache import cache

from resourcesync_portal.addresses import address_allowed, parse_address, resolve
from resourcesync_portal.streams import CheckedBackend, StreamWrapper, transport_with_backend

from .conf import notification_settings

DEFAULT_PORTS = {"http": 80, "https": 443}


class CallbackRefused(ValueError):
    """The callback URL may not be called (scheme, credentials, or an address not allowed)."""


@dataclass(frozen=True, slots=True)
class CallbackResponse:
    status: int
    #: The start of the body, at most MAX_RESPONSE_BYTES.
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def host_and_port(url: str) -> tuple[str, int]:
    """The host and port of a callback the hub may call; CallbackRefused says why not."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # an unclosed '[', a port past 65535
        raise CallbackRefused("is not a valid URL") from None
    if parts.scheme not in DEFAULT_PORTS:
        raise CallbackRefused("must be an http or https URL")
    if "@" in parts.netloc:
        raise CallbackRefused("may not carry credentials")
    if not parts.hostname:
        raise CallbackRefused("has no host")
    if port == 0:  # urlsplit's 0 would be taken for no port, and port 80 called
        raise CallbackRefused("may not name port 0")
    return parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def resolve_callback(url: str) -> tuple[str, int, list[str]]:
    """Host, port and the addresses to connect to; CallbackRefused when any is not allowed."""
    host, port = host_and_port(url)
    return host, port, checked_addresses(host, port)


def checked_addresses(host: str, port: int) -> list[str]:
    """The host's addresses now; CallbackRefused unless every one is allowed."""
    try:
        addresses = resolve(host, port)
    except (ValueError, OSError) as error:
        raise CallbackRefused(f"the callback's host cannot be resolved: {error}") from error
    allowed_networks = notification_settings().allowed_networks
    for address in addresses:
        if not address_allowed(parse_address(address), allowed_networks):
            raise CallbackRefused(
                f"the callback's host resolves to {address}, a private, loopback, "
                "link-local or reserved address"
            )
    return addresses


def with_query(url: str, params: dict[str, str]) -> str:
    """The URL with `params` added to any query it already has (WebSub §5.3)."""
    parts = urlsplit(url)
    query = "&".join(filter(None, [parts.query, urlencode(params)]))
    return urlunsplit(parts._replace(query=query))


def over_budget(scope: str, url: str, per_minute: int) -> bool:
    """Count one request for this URL in `scope`; True once past `per_minute` this minute.

    The counter lives in the shared cache, so every web and worker process counts together.
    """
    key = f"notifications:{scope}:" + hashlib.sha256(url.encode()).hexdigest()
    cache.add(key, 0, timeout=60)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=60)
        count = 1
    return count > per_minute


_clients: dict[int, httpx.Client] = {}


class AnswerDeadline(StreamWrapper):
    """Reads that end CALLBACK_TIMEOUT seconds after the request went out.

    httpx's timeouts bound each read, so a callback sending a byte every few
    seconds held a delivery thread for hours, and with it the whole batch.
    """

    def __init__(self, stream: httpcore.NetworkStream, seconds: float) -> None:
        super().__init__(stream)
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    def rewrap(self, stream: httpcore.NetworkStream) -> httpcore.NetworkStream:
        return AnswerDeadline(stream, self.seconds)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.deadline = time.monotonic() + self.seconds
        self.stream.write(buffer, timeout)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout(f"no whole answer within {self.seconds:g} s")
        return self.stream.read(max_bytes, left if timeout is None else min(timeout, left))


class _CallbackBackend(CheckedBackend):
    """Connections to addresses checked as they open, reading under a deadline.

    Pinning here rather than in the URL keeps the pool's connections apart per
    host name: one opened (and its TLS certificate checked) for one callback is
    never reused for another callback that shares its address.
    """

    def addresses(self, host: str, port: int) -> list[str]:
        return checked_addresses(host, port)

    def wrap(self, stream: httpcore.NetworkStream) -> httpcore.NetworkStream:
        return AnswerDeadline(stream, notification_settings().CALLBACK_TIMEOUT)


def shared_client() -> httpx.Client:
    """One client per process (its TLS context costs tens of milliseconds to build);
    after a fork the child builds its own."""
    client = _clients.get(os.getpid())
    if client is None:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
        transport = transport_with_backend(_CallbackBackend(), limits)
        client = httpx.Client(follow_redirects=False, trust_env=False, transport=transport)
        _clients.clear()
        _clients[os.getpid()] = client
    return client


def send(
    method: str, url: str, *, content: bytes = b"", headers: dict[str, str] | None = None
) -> CallbackResponse:
    """One request to a callback checked just now (and its connection when it opens)."""
    config = notification_settings()
    resolve_callback(url)
    client = shared_client()
    request = client.build_request(
        method,
        url,
        content=content,
        headers={"Accept-Encoding": "identity", **(headers or {})},
        timeout=config.CALLBACK_TIMEOUT,
    )
    response = client.send(request, stream=True)
    try:
        body = _read_bounded(response, config.MAX_RESPONSE_BYTES)
    finally:
        response.close()
    return CallbackResponse(response.status_code, body)


def _read_bounded(response: httpx.Response, limit: int) -> bytes:
    """At most `limit` bytes of the body; the rest is never read."""
    body = bytearray()
    for chunk in response.iter_raw():
        body += chunk
        if len(body) >= limit:
            break
    return bytes(body[:limit])
