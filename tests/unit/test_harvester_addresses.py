"""A source's DNS cannot point the harvester at the harvesting machine's own network.

`source.test` and its subdomains are given addresses here (getaddrinfo is
patched); real servers listen on 127.0.0.1 (the source) and 127.0.0.2 (an
"internal" service that a hostile subdomain points at).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harvester.addresses import AddressPolicy, AddressRefused
from harvester.client import FetchError, HarvestClient, address_policy
from harvester.config import ConfigError, HarvestConfig, config_from_mapping
from harvester.websub import CallbackServer, SubscriptionError, ask_hub


class Recorder(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        body = b"<urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'/>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def internal() -> Iterator[ThreadingHTTPServer]:
    """A service on 127.0.0.2 that no harvest should reach unless told to."""
    server = ThreadingHTTPServer(("127.0.0.2", 0), Recorder)
    server.paths = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def names(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Host names resolved by the test (others as usual)."""
    table = {"source.test": "127.0.0.1", "meta.source.test": "127.0.0.2"}
    resolve = socket.getaddrinfo

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        return resolve(table.get(str(host), host), *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return table


def config_for(port: int, **settings: object) -> HarvestConfig:
    return config_from_mapping(
        {
            "capability_list_url": f"http://source.test:{port}/capabilitylist.xml",
            "destination": "mirror",
            "retries": 0,
            **settings,
        },
        base_dir=Path("/tmp"),
    )


def client(port: int, **settings: object) -> HarvestClient:
    return HarvestClient(config_for(port, **settings), sleep=lambda _: None)


def read(response: object) -> bytes:
    return b"".join(response.iter_bytes())  # type: ignore[attr-defined]


def test_a_subdomain_pointing_at_a_private_address_is_not_fetched(internal) -> None:
    port = internal.server_port
    url = f"http://meta.source.test:{port}/latest/meta-data/"
    with client(port) as harvest:
        with pytest.raises(FetchError, match=r"127\.0\.0\.2.*allowed_networks"):
            harvest.fetch(url, read)
        with pytest.raises(FetchError, match=r"127\.0\.0\.2.*allowed_networks"):
            harvest.fetch_document(url)

    assert internal.paths == []  # type: ignore[attr-defined]


def test_allowed_networks_open_a_private_address(internal) -> None:
    port = internal.server_port
    url = f"http://meta.source.test:{port}/resourcelist.xml"
    with client(port, allowed_networks=["127.0.0.2/32"]) as harvest:
        assert harvest.fetch(url, read).startswith(b"<urlset")
        assert harvest.fetch_document(url).startswith(b"<urlset")

    assert internal.paths == ["/resourcelist.xml"] * 2  # type: ignore[attr-defined]


def test_the_sources_own_name_pointing_at_a_private_address_opens_nothing(internal, names) -> None:
    """The source controls its name's DNS answer too: it is no proof of a trusted address."""
    names["source.test"] = "127.0.0.2"
    port = internal.server_port
    with client(port) as harvest, pytest.raises(FetchError, match="allowed_networks"):
        harvest.fetch_document(f"http://source.test:{port}/x.xml")

    assert internal.paths == []  # type: ignore[attr-defined]


def test_an_address_written_out_in_the_config_is_trusted(internal) -> None:
    """A source on the local network, named by its address, is harvested as configured."""
    port = internal.server_port
    config = config_for(port, capability_list_url=f"http://127.0.0.2:{port}/capabilitylist.xml")
    with HarvestClient(config, sleep=lambda _: None) as harvest:
        assert harvest.fetch_document(f"http://127.0.0.2:{port}/x.xml").startswith(b"<urlset")


def test_localhost_stands_for_loopback(monkeypatch) -> None:
    answer = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80))]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: answer)

    assert AddressPolicy.trusting(["localhost"]).addresses("localhost", 80) == ["127.0.0.1"]
    with pytest.raises(AddressRefused):
        AddressPolicy.trusting(["source.test"]).addresses("source.test", 80)


def test_a_hub_at_a_private_address_is_not_asked(internal) -> None:
    """The hub comes from the source's Capability List: it may point anywhere."""
    port = internal.server_port
    config = config_for(port)
    with CallbackServer(config) as server, pytest.raises(SubscriptionError, match=r"127\.0\.0\.2"):
        ask_hub(
            f"http://meta.source.test:{port}/hub",
            "subscribe",
            topic="http://source.test/changes",
            server=server,
            lease_seconds=3600,
            token=None,
            timeout=1,
            policy=address_policy(config),
        )

    assert internal.paths == []  # type: ignore[attr-defined]


def test_only_the_allowed_addresses_of_a_host_are_connected_to(monkeypatch) -> None:
    """A name that answers with a public and a private address goes to the public one only."""
    answers = [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 80)) for a in ("10.1.2.3", "8.8.8.8")
    ]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: answers)

    assert AddressPolicy().addresses("mixed.example", 80) == ["8.8.8.8"]


@pytest.mark.parametrize(
    "address",
    ["169.254.169.254", "10.0.0.1", "127.0.0.1", "::1", "fd00::1", "224.0.0.1", "100.64.0.1"],
)
def test_private_loopback_link_local_and_multicast_addresses_are_refused(
    monkeypatch, address: str
) -> None:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    answer = [(family, socket.SOCK_STREAM, 6, "", (address, 80))]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: answer)

    with pytest.raises(AddressRefused, match="allowed_networks"):
        AddressPolicy().addresses("evil.example", 80)
    opened = AddressPolicy((ipaddress.ip_network(address),))
    assert opened.addresses("evil.example", 80) == [address]


def test_an_ipv4_mapped_address_is_judged_as_the_ipv4_address_it_carries(monkeypatch) -> None:
    answer = [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::ffff:169.254.169.254", 80, 0, 0))]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: answer)

    with pytest.raises(AddressRefused):
        AddressPolicy().addresses("evil.example", 80)
    assert AddressPolicy((ipaddress.ip_network("169.254.0.0/16"),)).addresses("evil.example", 80)


def test_a_host_name_no_resolver_takes_fails_that_get_and_only_that(internal) -> None:
    """A 64-character label (allowed: a subdomain of the source) crashed the harvest."""
    url = f"http://{'a' * 64}.source.test:{internal.server_port}/x"
    with client(internal.server_port) as harvest:
        for fetch in (harvest.fetch_document, lambda url: harvest.fetch(url, read)):
            with pytest.raises(FetchError, match="not a host name"):
                fetch(url)


def test_allowed_networks_must_be_networks() -> None:
    with pytest.raises(ConfigError, match="allowed_networks"):
        config_from_mapping(
            {
                "capability_list_url": "https://e.org/c.xml",
                "destination": "m",
                "allowed_networks": ["10.0.0.0/33"],
            },
            base_dir=Path("/tmp"),
        )
