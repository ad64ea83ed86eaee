"""A source's DNS cannot point the validator at the validating machine's own network.

The validator follows every document on the source's host and its subdomains,
whose names the source answers for: `meta.source.test` may resolve to a
service beside the validator. `source.test` and its subdomain are given
addresses here (getaddrinfo is patched); real servers listen on 127.0.0.1
(the source) and 127.0.0.2 (the "internal" service), on one port.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from validator import validate_source


class Source(BaseHTTPRequestHandler):
    """127.0.0.1 serves a Capability List naming a list on the subdomain; any other
    address records what it was asked for."""

    def do_GET(self) -> None:
        host, port = self.server.server_address[:2]
        if host != "127.0.0.1":
            self.server.paths.append(self.path)  # type: ignore[attr-defined]
        body = (
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
            'xmlns:rs="http://www.openarchives.org/rs/terms/"><rs:md capability="capabilitylist"/>'
            f"<url><loc>http://meta.source.test:{port}/latest/meta-data/</loc>"
            '<rs:md capability="resourcelist"/></url></urlset>'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, ThreadingHTTPServer]]:
    """The source's port, and the internal service on 127.0.0.2 at that port."""
    table = {"source.test": "127.0.0.1", "meta.source.test": "127.0.0.2"}
    resolve = socket.getaddrinfo

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        return resolve(table.get(str(host), host), *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    source = ThreadingHTTPServer(("127.0.0.1", 0), Source)
    port = source.server_address[1]
    internal = ThreadingHTTPServer(("127.0.0.2", port), Source)
    internal.paths = []  # type: ignore[attr-defined]
    for server in (source, internal):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield port, internal
    for server in (source, internal):
        server.shutdown()
        server.server_close()


def problems(report) -> list[str]:
    return [str(problem) for problem in report.problems]


def test_a_subdomain_resolving_to_another_private_address_is_not_fetched(servers) -> None:
    port, internal = servers
    report = validate_source(f"http://source.test:{port}/capabilitylist.xml", timeout=5)
    assert internal.paths == []  # type: ignore[attr-defined]
    assert any(
        line.startswith("http://meta.source.test") and "resolves to 127.0.0.2" in line
        for line in problems(report)
    ), problems(report)


def test_the_sources_own_host_is_fetched_wherever_it_resolves(servers) -> None:
    """The person validating named it: a portal on the local network is checked as before."""
    port, _ = servers
    url = f"http://source.test:{port}/capabilitylist.xml"
    report = validate_source(url, timeout=5)
    assert url in report.documents
    assert not [line for line in problems(report) if line.startswith(url) and "GET" in line]
