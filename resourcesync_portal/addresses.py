"""Which network addresses an outbound request may reach (hub deliveries, the harvester).

Both resolve a host themselves and connect only to an address checked here,
so a URL whose host points at the portal's own network (a cloud metadata
service, a database, localhost) is never requested unless a setting allows it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_address(address: str) -> IPAddress:
    """An address as getaddrinfo gives it (an IPv6 one may carry a `%zone`)."""
    return ipaddress.ip_address(address.split("%")[0])


def address_allowed(address: IPAddress, networks: Iterable[IPNetwork] = ()) -> bool:
    """Public unicast addresses, or those inside one of `networks`.

    An IPv4-mapped IPv6 address is judged as the IPv4 address it carries.
    """
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    if any(address in network for network in networks):
        return True
    return address.is_global and not address.is_multicast
