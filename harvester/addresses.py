"""The addresses a harvest may connect to: never the harvesting machine's own network.

`allowed_hosts` limits which *names* a harvest fetches from, but a source
controls its own DNS: a subdomain of it (allowed by default) may resolve to
169.254.169.254 or to a database next to the harvester. So every connection,
documents, resources and the hub alike, resolves the host here and goes only
to an address that is public, inside `allowed_networks`, or one written out
in `allowed_hosts` (`127.0.0.1:8000`; `localhost` stands for loopback). A
source on a private network by name needs `allowed_networks`: its name's DNS
answer is no proof, since the source may control it.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import httpcore
import httpx

from harvester.pace import Pace, PacedStream
from resourcesync_portal.addresses import IPNetwork, address_allowed, parse_address, resolve
from resourcesync_portal.streams import CheckedBackend, transport_with_backend


class Refused(Exception):
    """A request the harvest will not make; not worth a retry. `url` names it when known."""

    url: str | None = None


class AddressRefused(Refused):
    """A host resolves to no address the harvest may connect to."""


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    networks: tuple[IPNetwork, ...] = ()
    #: What the refusal of a non-public address tells the operator to do.
    advice: str = "which only allowed_networks can open"

    @classmethod
    def trusting(cls, hosts: Iterable[str], networks: Iterable[IPNetwork] = ()) -> AddressPolicy:
        """`networks`, the addresses among `hosts`, and loopback if `localhost` is one."""
        return cls((*networks, *(network for host in hosts for network in _named(host))))

    def addresses(self, host: str, port: int) -> list[str]:
        """The host's addresses this harvest may connect to, in the resolver's order."""
        try:
            found = resolve(host, port)
        except UnicodeError as error:  # a label over 63 characters, say: no retry mends it
            raise AddressRefused(f"{host} is not a host name: {error}") from error
        except OSError as error:
            raise OSError(f"{host} cannot be resolved: {error}") from error
        allowed = [a for a in found if address_allowed(parse_address(a), self.networks)]
        if not allowed:
            raise AddressRefused(
                f"{host} resolves to {', '.join(found)}: a private, loopback, link-local "
                f"or reserved address, {self.advice}"
            )
        return allowed

    def connect(self, host: str, port: int, timeout: float | None) -> socket.socket:
        """A TCP socket to the first allowed address of `host` that answers."""
        error: OSError | None = None
        for address in self.addresses(host, port):
            try:
                return socket.create_connection((address, port), timeout=timeout)
            except OSError as failed:
                error = failed
        assert error is not None
        raise error


def checked_transport(
    policy: AddressPolicy, limits: httpx.Limits, pace: Callable[[], Pace] | None = None
) -> httpx.HTTPTransport:
    """An httpx transport whose every new connection goes through `policy` (and a new `pace`)."""
    return transport_with_backend(_PolicyBackend(policy, pace), limits)


class _PolicyBackend(CheckedBackend):
    """Connections to the addresses a harvest's policy allows, paced if asked."""

    def __init__(self, policy: AddressPolicy, pace: Callable[[], Pace] | None) -> None:
        self.policy = policy
        self.pace = pace

    def addresses(self, host: str, port: int) -> list[str]:
        try:
            return self.policy.addresses(host, port)
        except OSError as error:
            raise httpcore.ConnectError(str(error)) from error

    def wrap(self, stream: httpcore.NetworkStream) -> httpcore.NetworkStream:
        return PacedStream(stream, self.pace()) if self.pace else stream


def _named(host: str) -> list[IPNetwork]:
    """What naming `host` in the config opens: an address written out, or this machine.

    Any other name is answered by DNS that the source may control (a source
    whose name resolves to 169.254.169.254 too), so it opens nothing.
    """
    if host == "localhost":
        return [ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")]
    try:
        return [ipaddress.ip_network(parse_address(host.strip("[]")))]
    except ValueError:
        return []
