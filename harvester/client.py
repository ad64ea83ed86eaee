"""HTTP access to a ResourceSync source: retries, limits and credentials.

Every GET goes through `HarvestClient.fetch`, which retries network errors,
429 and 5xx answers with exponential backoff and then fails with one clear
`FetchError`. The bearer token is sent only to the origin of the URL the user
gave (httpx drops it on redirects elsewhere), and no request, redirects
included, leaves the configured `allowed_hosts` (scheme, host and port, with
subdomains), so a hostile list cannot point the harvester at internal
services, not even at another port of the source's own host.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar
from urllib.parse import urljoin, urlsplit

import httpx

from harvester.config import DEFAULT_PORTS, HarvestConfig

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
        self._http = httpx.Client(
            timeout=httpx.Timeout(config.timeout),
            follow_redirects=True,
            headers={"User-Agent": USER_AGENT},
            limits=httpx.Limits(max_connections=config.concurrency + 2),
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
        """Close the connection pool."""
        self._http.close()

    def is_allowed(self, url: str) -> bool:
        """Whether `url` has an allowed scheme and port, on an allowed host or a subdomain."""
        parts = urlsplit(url)
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
        return self.fetch(url, self._read_document)

    def fetch_page(self, url: str) -> Page:
        """GET a document or web page (same size limit) with the targets of its Link headers."""

        def read(response: httpx.Response) -> Page:
            links = {
                str(rel): urljoin(str(response.url), link["url"])
                for rel, link in response.links.items()
                if rel and link.get("url")
            }
            return Page(url=url, body=self._read_document(response), links=links)

        return self.fetch(url, read)

    def _read_document(self, response: httpx.Response) -> bytes:
        """The body, refused once it passes `max_document_bytes`."""
        limit, url = self.config.max_document_bytes, str(response.request.url)
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
        consume: Callable[[httpx.Response], T],
        *,
        headers: dict[str, str] | Callable[[], dict[str, str]] | None = None,
    ) -> T:
        """GET `url` and hand the streaming response to `consume`, retrying transient errors.

        `consume` runs again on a retry, from scratch unless `headers` is a
        callable, asked before each attempt (a download resuming with Range).
        """
        if not self.is_allowed(url):
            raise FetchError(url, "the URL is not on an allowed host")
        attempts = self.config.retries + 1
        last_reason = ""
        for attempt in range(1, attempts + 1):
            try:
                extra = headers() if callable(headers) else headers
                with self._http.stream("GET", url, headers=self._headers(url, extra)) as response:
                    if response.status_code in _RETRY_STATUSES:
                        last_reason = f"HTTP {response.status_code}"
                    elif response.status_code >= 400:
                        status = response.status_code
                        raise FetchError(url, f"HTTP {status}", status=status)
                    else:
                        return consume(response)
            except httpx.TransportError as error:
                last_reason = (
                    f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
                )
            except httpx.HTTPError as error:  # redirect loops, undecodable bodies: not transient
                raise FetchError(url, f"{type(error).__name__}: {error}") from error
            if attempt < attempts:
                self._sleep(self.config.backoff * 2 ** (attempt - 1))
        raise FetchError(url, f"{last_reason} (gave up after {attempts} attempts)")

    def _headers(self, url: str, extra: dict[str, str] | None) -> dict[str, str]:
        headers = dict(extra or {})
        if self.config.bearer_token and _origin(url) == self.config.source_origin:
            headers["Authorization"] = f"Bearer {self.config.bearer_token}"
        return headers

    def _refuse_foreign_hosts(self, request: httpx.Request) -> None:
        if not self.is_allowed(str(request.url)):
            raise FetchError(str(request.url), "redirected to a host that is not allowed")


def _split_origin(origin: str) -> tuple[str, str, int]:
    """`scheme://host:port` (as the config normalises it) as its three parts."""
    scheme, _, rest = origin.partition("://")
    host, _, port = rest.rpartition(":")
    return scheme, host, int(port)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()
