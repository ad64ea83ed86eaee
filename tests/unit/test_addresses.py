"""Outbound requests (hub deliveries, the harvester) reach public addresses only."""

from __future__ import annotations

import ipaddress

import pytest

from resourcesync_portal.addresses import address_allowed, parse_address


@pytest.mark.parametrize(
    "address",
    [
        "169.254.169.254",
        "10.0.0.1",
        "127.0.0.1",
        "100.64.0.1",
        "0.0.0.0",  # noqa: S104 (an address judged, not a bind)
        "224.0.0.1",
        "::1",
        "fd00::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "64:ff9b::a9fe:a9fe",  # NAT64 form of 169.254.169.254
        "64:ff9b:1::1",  # local-use NAT64
        "2002:a9fe:a9fe::",  # 6to4 form of 169.254.169.254
        "::7f00:1",  # IPv4-compatible form of 127.0.0.1
        "fec0::1",  # site-local (deprecated, still not public)
    ],
)
def test_private_addresses_in_any_spelling_are_refused(address: str) -> None:
    assert not address_allowed(parse_address(address))


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "2606:4700:4700::1111", "64:ff9b::808:808", "2002:808:808::1"]
)
def test_public_addresses_are_allowed(address: str) -> None:
    assert address_allowed(parse_address(address))


def test_an_allowed_network_opens_the_ipv4_address_an_ipv6_one_carries() -> None:
    networks = [ipaddress.ip_network("169.254.0.0/16")]
    assert address_allowed(parse_address("64:ff9b::a9fe:a9fe"), networks)
    assert address_allowed(parse_address("fe80::1%eth0"), [ipaddress.ip_network("fe80::/10")])
