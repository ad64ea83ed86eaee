"""Keep-alive connections for the many small GETs of a harvest (resources, packages).

httpx spends about 0.6 ms of CPU on each GET, more than writing the copy; a
plain `http.client` connection kept open per thread and origin spends about
0.1 ms. Resource and package GETs go through here; ResourceSync documents,
which are few, still go through httpx (`harvester.client`). What this module
keeps from httpx: redirects are followed only to allowed origins (the caller
decides, per hop), gzip and deflate bodies are decoded, TLS is verified
against certifi's CA bundle, and a network error is one exception type
(`TransportError`) that the caller retries.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import Message
from urllib.parse import urljoin, urlsplit

#: As httpx: at most this many redirects for one GET.
MAX_REDIRECTS = 20
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
CHUNK_SIZE = 64 * 1024
#: Errors that mean the connection is unusable; a reused one may just have been
#: closed by the server while idle, so the request is sent once more on a new one.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)

Origin = tuple[str, str, int]


class TransportError(Exception):
    """The network failed (refused, reset, timed out, malformed answer): worth a retry."""


class RedirectRefused(Exception):
    """A redirect pointed somewhere the caller does not allow (`url` names it)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(reason)
        self.url = url


@dataclass(slots=True)
class DirectResponse:
    """An answer as the harvester reads it: status, headers, final URL and body chunks."""

    status_code: int
    headers: Message
    url: str
    raw: http.client.HTTPResponse

    def iter_bytes(self) -> Iterator[bytes]:
        """The body, decoded if the server compressed it; network errors as TransportError."""
        decoder = _decoder(self.headers.get("Content-Encoding", ""))
        try:
            while chunk := self.raw.read(CHUNK_SIZE):
                yield decoder.decompress(chunk) if decoder else chunk
            if decoder:
                yield decoder.flush()
        except (OSError, http.client.HTTPException, zlib.error) as error:
            raise TransportError(_describe(error)) from error


class DirectConnections:
    """One `http.client` connection per thread and origin, reused from GET to GET."""

    def __init__(self, *, timeout: float, user_agent: str) -> None:
        self.timeout = timeout
        self.user_agent = user_agent
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[http.client.HTTPConnection] = []
        self._tls: ssl.SSLContext | None = None

    def close(self) -> None:
        """Close every connection any thread opened."""
        with self._lock:
            connections, self._all = self._all, []
        for connection in connections:
            connection.close()

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
            connection, response = self._get(url, headers_for(url))
            location = response.getheader("Location")
            if response.status in REDIRECT_STATUSES and location:
                _discard(connection, response)
                url = urljoin(url, location)
                if not allowed(url):
                    raise RedirectRefused(url, "redirected to a host that is not allowed")
                continue
            try:
                yield DirectResponse(response.status, response.headers, url, response)
            finally:
                _discard(connection, response)
            return
        raise TransportError(f"TooManyRedirects: more than {MAX_REDIRECTS} redirects")

    def _get(
        self, url: str, headers: dict[str, str]
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        parts = urlsplit(url)
        origin = (parts.scheme, parts.hostname or "", parts.port or _default_port(parts.scheme))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = {"User-Agent": self.user_agent, **headers}
        connection = self._connection(origin)
        reused = connection.sock is not None
        try:
            connection.request("GET", target, headers=headers)
            return connection, connection.getresponse()
        except _STALE as error:
            connection.close()
            if not reused:
                raise TransportError(_describe(error)) from error
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            raise TransportError(_describe(error)) from error
        try:
            connection.request("GET", target, headers=headers)
            return connection, connection.getresponse()
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            raise TransportError(_describe(error)) from error

    def _connection(self, origin: Origin) -> http.client.HTTPConnection:
        pool: dict[Origin, http.client.HTTPConnection] | None = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = {}
        connection = pool.get(origin)
        if connection is None:
            scheme, host, port = origin
            if scheme == "https":
                connection = http.client.HTTPSConnection(
                    host, port, timeout=self.timeout, context=self._tls_context()
                )
            else:
                connection = http.client.HTTPConnection(host, port, timeout=self.timeout)
            pool[origin] = connection
            with self._lock:
                self._all.append(connection)
        return connection

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


def _discard(connection: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
    """Keep the connection if the answer was read to its end, else close it."""
    if response.isclosed():
        return
    if response.length is not None and response.length <= CHUNK_SIZE:
        try:  # a small unread body (an error page, a redirect): cheaper to read than reconnect
            response.read()
            return
        except (OSError, http.client.HTTPException):
            pass
    connection.close()


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
    name = {
        ConnectionRefusedError: "ConnectError",
        TimeoutError: "Timeout",
    }.get(type(error), type(error).__name__)
    return f"{name}: {error}" if str(error) else name
