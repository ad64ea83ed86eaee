"""HTTP access to a ResourceSync source: retries, limits and credentials.

Every GET goes through `HarvestClient.fetch`, which retries network errors,
429 and 5xx answers with exponential backoff and then fails with one clear
`FetchError`. The bearer token is sent only to the origin of the URL the user
gave (httpx drops it on redirects elsewhere), and no request, redirects
included, leaves the configured `allowed_hosts` (scheme, host and port, with
subdomains), so a hostile list cannot point the harvester at internal
services, not even at another port of the source's own host; nor connects to
a private address the config does not name (`harvester.addresses`).

Documents go through httpx; resources and packages, tens of thousands of GETs
in a baseline, through `harvester.connections` (plain keep-alive
connections, a fifth of httpx's CPU per GET) unless a proxy is configured in
the environment or a test hands in an httpx transport.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any, Protocol, TypeVar
from urllib.parse import urljoin, urlsplit

import httpx

from harvester.addresses import AddressPolicy, Refused, checked_transport
from harvester.config import DEFAULT_PORTS, HarvestConfig
from harvester.connections import DirectConnections, TransportError
from harvester.pace import Pace

T = TypeVar("T")

USER_AGENT = "resourcesync-portal-harvester/0.1"
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
#: Answers that say the resource is not there (any more).
GONE_STATUSES = frozenset({404, 410})


class FetchError(Exception):
    """A GET failed for good: after retries, or at once for a 4xx or a refused URL."""

    def __init__(self, url: str, reason: str, *, status: int | None = None) -> None:
        super().__init__(f"GET {url} failed: {reason}")
        self.url = url
        self.reason = reason
        self.status = status

    @property
    def gone(self) -> bool:
        """The source answered that the resource is not there (404 or 410)."""
        return self.status in GONE_STATUSES


class Response(Protocol):
    """What `fetch` hands its consumer: an httpx.Response or a `DirectResponse`."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Any: ...

    def iter_bytes(self) -> Iterator[bytes]: ...


Opener = Callable[[str, dict[str, str]], AbstractContextManager[Any]]


@dataclass(frozen=True, slots=True)
class Page:
    """A document or web page as discovery needs it: its body and where it links to."""

    url: str
    body: bytes
    #: Targets of `Link: <...>; rel="..."` headers, by relation, made absolute.
    links: dict[str, str]


class HarvestClient:
    """One connection pool shared by the download threads (httpx.Client is thread-safe)."""

    def __init__(
        self,
        config: HarvestConfig,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self._sleep = sleep
        self._allowed = tuple(_split_origin(origin) for origin in config.allowed_hosts)
        self._decisions: dict[tuple[str, str], bool] = {}
        limits = httpx.Limits(max_connections=config.concurrency + 2)
        self._direct: DirectConnections | None = None
        if transport is None and not proxies_configured():
            policy = address_policy(config)
            transport = checked_transport(
                policy, limits, partial(Pace, config.min_rate, config.timeout)
            )
            self._direct = DirectConnections(
                timeout=config.timeout,
                user_agent=USER_AGENT,
                policy=policy,
                min_rate=config.min_rate,
            )
        self._http = httpx.Client(
            timeout=httpx.Timeout(config.timeout),
            follow_redirects=True,
            headers={"User-Agent": USER_AGENT},
            limits=limits,
            transport=transport,
            event_hooks={"request": [self._refuse_foreign_hosts]},
        )

    def __enter__(self) -> HarvestClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pools."""
        self._http.close()
        if self._direct is not None:
            self._direct.close()

    def is_allowed(self, url: str) -> bool:
        """Whether `url` has an allowed scheme and port, on an allowed host or a subdomain."""
        parts = urlsplit(url)
        return self._origin_allowed(parts.scheme, parts.netloc)

    def _origin_allowed(self, scheme: str, netloc: str) -> bool:
        """`is_allowed` for one scheme and netloc; remembered, as a source has few."""
        key = (scheme, netloc)
        allowed = self._decisions.get(key)
        if allowed is None:
            allowed = self._decisions[key] = self._decide(scheme, netloc)
        return allowed

    def _decide(self, scheme: str, netloc: str) -> bool:
        parts = urlsplit(f"{scheme}://{netloc}")
        scheme, host = parts.scheme.lower(), (parts.hostname or "").rstrip(".")
        if scheme not in DEFAULT_PORTS or not host:
            return False
        try:
            port = parts.port or DEFAULT_PORTS[scheme]
        except ValueError:
            return False
        return any(
            (scheme, port) == (allowed_scheme, allowed_port)
            and (host == allowed_host or host.endswith("." + allowed_host))
            for allowed_scheme, allowed_host, allowed_port in self._allowed
        )

    def fetch_document(self, url: str) -> bytes:
        """GET a ResourceSync document, refusing it once it passes the size limit."""
        return self._fetch(self._open_httpx, url, self._read_document)

    def fetch_page(self, url: str) -> Page:
        """GET a document or web page (same size limit) with the targets of its Link headers."""

        def read(response: httpx.Response) -> Page:
            return Page(url=url, body=self._read_document(response), links=link_targets(response))

        return self._fetch(self._open_httpx, url, read)

    def _read_document(self, response: httpx.Response) -> bytes:
        """The body, refused once it passes `max_document_bytes`."""
        limit, url = self.config.max_document_bytes, str(response.url)
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > limit:
            raise FetchError(url, f"document is larger than the limit of {limit} bytes")
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > limit:
                raise FetchError(url, f"document is larger than the limit of {limit} bytes")
        return bytes(body)

    def fetch(
        self,
        url: str,
        consume: Callable[[Any], T],
        *,
        headers: dict[str, str] | Callable[[], dict[str, str]] | None = None,
    ) -> T:
        """GET a resource or package and hand the streaming `Response` to `consume`.

        Transient errors are retried; `consume` runs again on a retry, from
        scratch unless `headers` is a callable, asked before each attempt (a
        download resuming with Range).
        """
        opener = self._open_direct if self._direct is not None else self._open_httpx
        return self._fetch(opener, url, consume, headers=headers)

    def _fetch(
        self,
        opener: Opener,
        url: str,
        consume: Callable[[Any], T],
        *,
        headers: dict[str, str] | Callable[[], dict[str, str]] | None = None,
    ) -> T:
        if not self.is_allowed(url):
            raise FetchError(url, "the URL is not on an allowed host")
        attempts = self.config.retries + 1
        last_reason = ""
        for attempt in range(1, attempts + 1):
            try:
                extra = headers() if callable(headers) else headers
                with opener(url, extra or {}) as response:
                    if response.status_code in _RETRY_STATUSES:
                        last_reason = f"HTTP {response.status_code}"
                    elif response.status_code >= 400:
                        status = response.status_code
                        raise FetchError(url, f"HTTP {status}", status=status)
                    else:
                        return consume(response)
            except TransportError as error:
                last_reason = str(error)
            except httpx.TransportError as error:
                last_reason = (
                    f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
                )
            except Refused as error:  # a redirect elsewhere, or a private address
                raise FetchError(error.url or url, str(error)) from error
            except httpx.HTTPError as error:  # redirect loops, undecodable bodies: not transient
                raise FetchError(url, f"{type(error).__name__}: {error}") from error
            if attempt < attempts:
                self._sleep(self.config.backoff * 2 ** (attempt - 1))
        raise FetchError(url, f"{last_reason} (gave up after {attempts} attempts)")

    def _open_httpx(self, url: str, extra: dict[str, str]) -> AbstractContextManager[Any]:
        return self._http.stream("GET", url, headers=self._headers(url, extra))

    def _open_direct(self, url: str, extra: dict[str, str]) -> AbstractContextManager[Any]:
        assert self._direct is not None
        return self._direct.stream(url, lambda hop: self._headers(hop, extra), self.is_allowed)

    def _headers(self, url: str, extra: dict[str, str] | None) -> dict[str, str]:
        headers = dict(extra or {})
        if self.config.bearer_token and _origin(url) == self.config.source_origin:
            headers["Authorization"] = f"Bearer {self.config.bearer_token}"
        return headers

    def _refuse_foreign_hosts(self, request: httpx.Request) -> None:
        if not self.is_allowed(str(request.url)):
            raise FetchError(str(request.url), "redirected to a host that is not allowed")


def link_targets(response: httpx.Response) -> dict[str, str]:
    """Targets of the `Link` headers by relation, made absolute: where a page leads."""
    return {
        str(rel): urljoin(str(response.url), link["url"])
        for rel, link in response.links.items()
        if rel and link.get("url")
    }


def address_policy(config: HarvestConfig) -> AddressPolicy:
    """The configured networks, and the addresses of the hosts the config names."""
    hosts = dict.fromkeys(_split_origin(origin)[1] for origin in config.allowed_hosts)
    return AddressPolicy.trusting(hosts, config.allowed_networks)


def proxies_configured() -> bool:
    """Whether the environment names an HTTP(S) proxy, which only httpx would use."""
    return any(scheme in ("http", "https", "all") for scheme in urllib.request.getproxies())


def _split_origin(origin: str) -> tuple[str, str, int]:
    """`scheme://host:port` (as the config normalises it) as its three parts."""
    scheme, _, rest = origin.partition("://")
    host, _, port = rest.rpartition(":")
    return scheme, host, int(port)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()
