"""Keep-alive connections for the many small GETs of a harvest (resources, packages).

httpx spends about 0.6 ms of CPU on each GET, more than writing the copy; a
connection of our own (`harvester.http1`) kept open per thread and origin
spends a sixth of that. Resource and package GETs go through here;
ResourceSync documents, which are few, still go through httpx
(`harvester.client`). What this module keeps from httpx: redirects are
followed only to allowed origins (the caller decides, per hop), gzip and
deflate bodies are decoded, TLS is verified against certifi's CA bundle, and
a network error is one exception type (`TransportError`) that the caller
retries. Every connection goes to an address `harvester.addresses` allows.
"""

from __future__ import annotations

import ssl
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from harvester.addresses import AddressPolicy, Refused
from harvester.http1 import Connection, Headers, ProtocolError, Response, StaleConnection
from harvester.pace import Pace

#: As httpx: at most this many redirects for one GET.
MAX_REDIRECTS = 20
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
CHUNK_SIZE = 64 * 1024

Origin = tuple[str, str, int]
Pool = dict[Origin, Connection]


class TransportError(Exception):
    """The network failed (refused, reset, timed out, malformed answer): worth a retry."""


class RedirectRefused(Refused):
    """A redirect pointed somewhere the caller does not allow (`url` names it)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(reason)
        self.url = url


@dataclass(slots=True)
class DirectResponse:
    """An answer as the harvester reads it: status, headers, final URL and body chunks."""

    status_code: int
    headers: Headers
    url: str
    raw: Response

    def iter_bytes(self) -> Iterator[bytes]:
        """The body, decoded if the server compressed it; network errors as TransportError."""
        decoder = _decoder(self.headers.value("Content-Encoding"))
        try:
            while chunk := self.raw.read(CHUNK_SIZE):
                yield decoder.decompress(chunk) if decoder else chunk
            if decoder:
                yield decoder.flush()
        except (OSError, ProtocolError, zlib.error) as error:
            raise TransportError(_describe(error)) from error


class DirectConnections:
    """One connection per thread and origin, reused from GET to GET.

    A thread's connections are closed once the thread has ended: each
    download starts a new thread pool, and `harvest --follow` downloads once
    per notification on one client, so sockets of finished pools would pile up.
    """

    def __init__(
        self, *, timeout: float, user_agent: str, policy: AddressPolicy, min_rate: float
    ) -> None:
        self.timeout = timeout
        self.user_agent = user_agent
        self.policy = policy
        self.min_rate = min_rate
        self._local = threading.local()
        self._lock = threading.Lock()
        self._pools: dict[threading.Thread, Pool] = {}
        self._tls: ssl.SSLContext | None = None

    def close(self) -> None:
        """Close every connection any thread opened (a live thread may open its own again)."""
        with self._lock:
            pools = list(self._pools.values())
            self._pools = {
                thread: pool for thread, pool in self._pools.items() if thread.is_alive()
            }
        _close_pools(pools)

    @contextmanager
    def stream(
        self,
        url: str,
        headers_for: Callable[[str], dict[str, str]],
        allowed: Callable[[str], bool],
    ) -> Iterator[DirectResponse]:
        """GET `url`, following redirects that `allowed` accepts; yield the final answer.

        `headers_for(url)` gives each hop's headers (a token goes to its origin
        only). The connection is kept for the next GET only once the body has
        been read to its end.
        """
        for _ in range(MAX_REDIRECTS + 1):
            response = self._get(url, headers_for(url))
            location = response.headers.get("Location")
            if response.status in REDIRECT_STATUSES and location:
                _release(response)
                url = urljoin(url, location)
                if not allowed(url):
                    raise RedirectRefused(url, "redirected to a host that is not allowed")
                continue
            try:
                yield DirectResponse(response.status, response.headers, url, response)
            finally:
                _release(response)
            return
        raise TransportError(f"TooManyRedirects: more than {MAX_REDIRECTS} redirects")

    def _get(self, url: str, headers: dict[str, str]) -> Response:
        """Send the GET; a reused connection the server had closed gets one more try."""
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        try:
            origin = (scheme, parts.hostname or "", parts.port or _default_port(scheme))
        except ValueError as error:
            raise TransportError(f"InvalidURL: {error}") from error
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = {"User-Agent": self.user_agent, **headers}
        connection = self._connection(origin)
        for last_try in (not connection.is_open, True):
            try:
                return connection.get(target, headers)
            except StaleConnection as error:
                connection.close()
                if last_try:
                    raise TransportError(_describe(error)) from error
            except (OSError, ProtocolError, ValueError) as error:
                connection.close()
                raise TransportError(_describe(error)) from error
        raise AssertionError("unreachable")  # pragma: no cover

    def _connection(self, origin: Origin) -> Connection:
        pool: Pool | None = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = self._new_pool()
        connection = pool.get(origin)
        if connection is None:
            connection = pool[origin] = Connection(
                *origin,
                timeout=self.timeout,
                tls=self._tls_context,
                connect=self.policy.connect,
                pace=Pace(self.min_rate, self.timeout),
            )
        return connection

    def _new_pool(self) -> Pool:
        """This thread's empty pool; first close the pools of threads that have ended."""
        pool: Pool = {}
        with self._lock:
            ended = [thread for thread in self._pools if not thread.is_alive()]
            finished = [self._pools.pop(thread) for thread in ended]
            self._pools[threading.current_thread()] = pool
        _close_pools(finished)
        return pool

    def _tls_context(self) -> ssl.SSLContext:
        with self._lock:
            if self._tls is None:
                self._tls = _verified_context()
            return self._tls


def _verified_context() -> ssl.SSLContext:
    """Certificates checked against certifi's bundle, as httpx does."""
    try:
        import certifi
    except ImportError:  # pragma: no cover - httpx depends on certifi
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def _close_pools(pools: list[Pool]) -> None:
    for pool in pools:
        for connection in list(pool.values()):
            connection.close()


def _release(response: Response) -> None:
    """Keep the connection for the next GET if this answer was read to its end, else close."""
    unread = response.unread
    if not response.complete and unread is not None and unread <= CHUNK_SIZE:
        try:  # a small unread body (an error page, a redirect): cheaper to read than reconnect
            while response.read(CHUNK_SIZE):
                pass
        except (OSError, ProtocolError):
            response.connection.close()
            return
    if not (response.complete and response.reusable):
        response.connection.close()


def _decoder(encoding: str) -> zlib._Decompress | None:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise TransportError(f"DecodingError: unsupported Content-Encoding {encoding!r}")


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _describe(error: BaseException) -> str:
    names: dict[type[BaseException], str] = {
        ConnectionRefusedError: "ConnectError",
        TimeoutError: "Timeout",
    }
    name = names.get(type(error), type(error).__name__)
    return f"{name}: {error}" if str(error) else name
