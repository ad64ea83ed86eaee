"""The HTTP side: fetch a document within the source's authority, and check how it is served.

A document is read once in full (up to a cap); the conditional and gzip
requests are compared with it by digest, so no second copy is kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import ipaddress
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urljoin

import httpx

from harvester.addresses import AddressPolicy, Refused, checked_transport
from harvester.client import link_targets, proxies_configured
from resourcesync_portal.addresses import IPNetwork, parse_address, resolve

from .authority import Authority

USER_AGENT = "resourcesync-portal-validator/0.1"
#: Above the 50 MB limit, so an oversized document is still measured and reported.
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
MAX_REDIRECTS = 5
#: Conditional GETs of a document rewritten meanwhile (each with the validator of the
#: 200 before it) before a 200 is reported.
ATTEMPTS = 3
#: Seconds before each comparison of a gzip answer with the plain document: a front
#: server switches the twin a moment before the plain file (up to 100 ms seen under load).
GZIP_RETRY_DELAYS = (0.0, 0.2, 1.0)
GZIP_DIFFERS = "the response to Accept-Encoding: gzip does not decompress to the plain document"
XML_TYPES = frozenset({"application/xml", "text/xml"})
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


class FetchFailed(Exception):
    """A document could not be read; the message is the problem to report."""


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str
    headers: httpx.Headers
    body: bytes
    #: SHA-256 of the body, to compare other representations with.
    digest: bytes
    #: Targets of its `Link` headers by relation, for discovery from a web page.
    links: dict[str, str]

    @property
    def is_web_page(self) -> bool:
        """Served as HTML: a site's page, which may lead to a source but is no document."""
        return _media_type(self.headers) in HTML_TYPES


class Fetcher:
    """GETs within one authority, with a token, timeouts and a size cap."""

    def __init__(
        self,
        authority: Authority,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.authority = authority
        self.max_bytes = max_bytes
        self._token = {"Authorization": f"Bearer {token}"} if token else {}
        if transport is None and not proxies_configured():
            transport = checked_transport(source_policy(authority), httpx.Limits())
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout), headers={"User-Agent": USER_AGENT}, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def get(self, url: str) -> Fetched:
        """The document's plain (identity) bytes; FetchFailed with the reason otherwise."""
        response = self._open(url, {"Accept-Encoding": "identity"})
        body, digest = io.BytesIO(), hashlib.sha256()
        try:
            for chunk in self._chunks(response, raw=False):
                body.write(chunk)
                digest.update(chunk)
        finally:
            response.close()
        return Fetched(
            str(response.url),
            response.headers,
            body.getvalue(),
            digest.digest(),
            link_targets(response),
        )

    def http_problems(self, fetched: Fetched) -> list[str]:
        """Content type, validators, 304 on a conditional GET, gzip equal to plain."""
        problems = _header_problems(fetched.headers)
        for name, condition in (("ETag", "If-None-Match"), ("Last-Modified", "If-Modified-Since")):
            value = fetched.headers.get(name)
            if value is None:
                continue
            status, value = self._conditional_status(fetched.url, name, condition, value)
            if status != 304:
                problems.append(f"a GET with {condition}: {value} answered {status}, not 304")
        problems += self._gzip_problems(fetched)
        return problems

    def _conditional_status(
        self, url: str, name: str, condition: str, value: str
    ) -> tuple[int | str, str]:
        """(status, value sent) of a GET with `condition: value`.

        A 200 with another `name` is a document rewritten since it was read (an open
        Change List taking events): asked again with that value, a few times.
        """
        for _ in range(ATTEMPTS):
            try:
                response = self._open(
                    url, {"Accept-Encoding": "identity", condition: value}, ok=(200, 304)
                )
            except FetchFailed as error:
                return str(error), value
            response.close()
            current = response.headers.get(name)
            if response.status_code == 304 or current in (None, value):
                break
            value = current
        return response.status_code, value

    def _gzip_problems(self, fetched: Fetched) -> list[str]:
        """The gzip answer decompresses to the plain document read before or just after it.

        A document rewritten in between (an open Change List taking events), or a front
        server whose gzip twin is switched before the plain file, differs for a moment:
        both are read again, a little later, twice, before a difference is reported.
        """
        plain = fetched.digest
        for delay in GZIP_RETRY_DELAYS:
            time.sleep(delay)
            zipped = self._gzip_digest(fetched.url)
            if isinstance(zipped, list):
                return zipped
            if zipped == plain:
                return []
            try:
                plain = self.get(fetched.url).digest
            except FetchFailed:
                break
            if zipped == plain:
                return []
        return [GZIP_DIFFERS]

    def _gzip_digest(self, url: str) -> bytes | list[str]:
        """SHA-256 of the decompressed answer to Accept-Encoding: gzip, or its problem."""
        try:
            response = self._open(url, {"Accept-Encoding": "gzip"})
        except FetchFailed as error:
            return [f"a GET with Accept-Encoding: gzip failed: {error}"]
        try:
            encoding = response.headers.get("Content-Encoding", "identity").lower()
            if encoding not in ("gzip", "identity"):
                return [f"answered Accept-Encoding: gzip with Content-Encoding: {encoding}"]
            digest = hashlib.sha256()
            for chunk in self._chunks(response, raw=True, gunzip=encoding == "gzip"):
                digest.update(chunk)
        except FetchFailed as error:
            return [f"the gzip response is unreadable: {error}"]
        finally:
            response.close()
        return digest.digest()

    def _open(
        self, url: str, headers: dict[str, str], ok: tuple[int, ...] = (200,)
    ) -> httpx.Response:
        """Follow redirects by hand, so none leaves the authority; the token goes only to
        the source's own origin (not its subdomains, nor an --allow-host)."""
        for _ in range(MAX_REDIRECTS + 1):
            if not self.authority.covers(url):
                raise FetchFailed(
                    f"{url} is outside the source's authority ({self.authority}): not fetched"
                )
            sent = {**headers, **self._token} if self.authority.is_origin_of(url) else headers
            try:
                response = self._http.send(
                    self._http.build_request("GET", url, headers=sent), stream=True
                )
            except httpx.HTTPError as error:
                raise FetchFailed(f"GET {url} failed: {error!r}") from error
            except Refused as error:
                raise FetchFailed(f"GET {url} refused: {error}") from error
            if response.is_redirect and "Location" in response.headers:
                response.close()
                url = urljoin(url, response.headers["Location"])
                continue
            if response.status_code not in ok:
                response.close()
                raise FetchFailed(_status_message(response))
            return response
        raise FetchFailed(f"more than {MAX_REDIRECTS} redirects")

    def _chunks(
        self, response: httpx.Response, *, raw: bool, gunzip: bool = False
    ) -> Iterator[bytes]:
        """The body up to the cap; gunzipped in steps, so a small bomb stays small."""
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > self.max_bytes and not gunzip:
            raise FetchFailed(
                f"Content-Length {declared} is over the cap of {self.max_bytes} bytes"
            )
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS) if gunzip else None
        size = 0
        try:
            for chunk in response.iter_raw() if raw else response.iter_bytes():
                data = _inflate(inflater, chunk, self.max_bytes - size + 1) if inflater else chunk
                size += len(data)
                if size > self.max_bytes:
                    raise FetchFailed(f"larger than the cap of {self.max_bytes} bytes: not checked")
                yield data
        except (httpx.HTTPError, zlib.error) as error:
            raise FetchFailed(f"reading the body failed: {error!r}") from error
        if inflater is not None and not inflater.eof:
            raise FetchFailed("the gzip stream is truncated")


def source_policy(authority: Authority) -> AddressPolicy:
    """Public addresses, those the source's own host has now (the person validating
    named it), and those written out in --allow-host (loopback for `localhost`).

    A subdomain's DNS is the source's to answer: one pointing at 169.254.169.254
    or a service beside the validator opens nothing, as for the harvester.
    """
    try:
        own = resolve(authority.host, authority.port)
    except (OSError, UnicodeError):
        own = []  # the first GET says why
    networks: list[IPNetwork] = [ipaddress.ip_network(parse_address(a)) for a in own]
    policy = AddressPolicy.trusting((authority.host, *authority.extra_hosts), networks)
    return dataclasses.replace(
        policy, advice="which the validator reaches only on the source's own host"
    )


def _inflate(inflater: zlib._Decompress, chunk: bytes, room: int) -> bytes:
    data = inflater.decompress(chunk, room)
    if inflater.unconsumed_tail:
        raise FetchFailed("the gzip stream decompresses to more than the cap")
    return data


def _header_problems(headers: httpx.Headers) -> list[str]:
    problems = []
    media_type = _media_type(headers)
    if media_type not in XML_TYPES and not media_type.endswith("+xml"):
        problems.append(
            f"Content-Type is {media_type or 'missing'}, not an XML type (application/xml)"
        )
    if "ETag" not in headers and "Last-Modified" not in headers:
        problems.append(
            "neither ETag nor Last-Modified: destinations cannot make conditional requests"
        )
    return problems


def _media_type(headers: httpx.Headers) -> str:
    return headers.get("Content-Type", "").split(";")[0].strip().lower()


def _status_message(response: httpx.Response) -> str:
    message = f"HTTP {response.status_code}"
    if response.status_code == 401:
        message += " (protected: pass --token)"
    return message
