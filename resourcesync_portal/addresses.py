"""Which network addresses an outbound request may reach (hub deliveries, the harvester).

Both resolve a host themselves and connect only to an address checked here,
so a URL whose host points at the portal's own network (a cloud metadata
service, a database, localhost) is never requested unless a setting allows it.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def resolve(host: str, port: int) -> list[str]:
    """The host's addresses, in the resolver's order, each once (OSError, UnicodeError)."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


def parse_address(address: str) -> IPAddress:
    """An address as getaddrinfo gives it (an IPv6 one may carry a `%zone`)."""
    return ipaddress.ip_address(address.split("%")[0])


#: IPv6 prefixes that carry an IPv4 address in their last 32 bits (NAT64, IPv4-compatible).
_CARRYING_IPV4 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("::/96"))
#: IPv6 ranges Python counts as global that are not: local-use NAT64, old site-local.
_NOT_PUBLIC = (ipaddress.ip_network("64:ff9b:1::/48"), ipaddress.ip_network("fec0::/10"))


def address_allowed(address: IPAddress, networks: Iterable[IPNetwork] = ()) -> bool:
    """Public unicast addresses, or those inside one of `networks`.

    An IPv6 address that carries an IPv4 one (mapped, 6to4, NAT64,
    IPv4-compatible) is judged as that IPv4 address: on a host that routes
    them, `64:ff9b::a9fe:a9fe` reaches 169.254.169.254.
    """
    carried = carried_ipv4(address)
    spellings = [address] if carried is None else [address, carried]
    if any(form in network for form in spellings for network in networks):
        return True
    address = carried or address
    if any(address in network for network in _NOT_PUBLIC):
        return False
    return address.is_global and not address.is_multicast


def carried_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for, if it stands for one."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    carried = address.ipv4_mapped or address.sixtofour
    if carried is None and int(address) > 1 and any(address in n for n in _CARRYING_IPV4):
        carried = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return carried
