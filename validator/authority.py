"""Which URLs a source may speak for, and so which the validator may fetch.

The spec leaves this to the Sitemap protocol's "one host" rule; the reference
client (resync's `UrlAuthority`, non-strict mode) enforces: the same scheme,
and the same host or a subdomain of it. We add the port, since two ports are
two servers. `extra_hosts` lets an aggregator's resources on other hosts count.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


def is_absolute_http(url: str) -> bool:
    """An absolute http(s) URL with a host: what every `<loc>` must be."""
    try:
        parts = urlsplit(url)
        return parts.scheme in DEFAULT_PORTS and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a bad port or bracketed host
        return False


@dataclass(frozen=True, slots=True)
class Authority:
    scheme: str
    host: str
    port: int
    extra_hosts: frozenset[str] = frozenset()

    @classmethod
    def of(cls, url: str, extra_hosts: tuple[str, ...] = ()) -> Authority:
        """The authority of the URL a source was found at."""
        parts = urlsplit(url)
        return cls(
            scheme=parts.scheme,
            host=(parts.hostname or "").rstrip("."),
            port=parts.port or DEFAULT_PORTS.get(parts.scheme, 0),
            extra_hosts=frozenset(host.lower().rstrip(".") for host in extra_hosts),
        )

    def covers(self, url: str) -> bool:
        """Whether the source has authority over `url` (and so may be fetched)."""
        if not is_absolute_http(url):
            return False
        parts = urlsplit(url)
        host = _host(parts)
        if host in self.extra_hosts:
            return True
        port = parts.port or DEFAULT_PORTS[parts.scheme]
        same_server = host == self.host or host.endswith("." + self.host)
        return parts.scheme == self.scheme and port == self.port and same_server

    def is_origin_of(self, url: str) -> bool:
        """Whether `url` is on the source's own origin: the only one the token goes to."""
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme, 0)
        return (parts.scheme, _host(parts), port) == (self.scheme, self.host, self.port)

    def names(self, link: str, expected: str) -> bool:
        """Whether a link names `expected`: the same URL, or on an allowed host the same
        path, as documents never rewritten (final manifests) keep the host they were made on."""
        if link == expected:
            return True
        if not is_absolute_http(link):
            return False
        parts = urlsplit(link)
        return _host(parts) in self.extra_hosts and parts[2:] == urlsplit(expected)[2:]

    def __str__(self) -> str:
        default = DEFAULT_PORTS.get(self.scheme)
        port = "" if self.port == default else f":{self.port}"
        return f"{self.scheme}://{self.host}{port}"


def _host(parts: SplitResult) -> str:
    return (parts.hostname or "").rstrip(".")
