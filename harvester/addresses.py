"""The addresses a harvest may connect to: never the harvesting machine's own network.

`allowed_hosts` limits which *names* a harvest fetches from, but a source
controls its own DNS: a subdomain of it (allowed by default) may resolve to
169.254.169.254 or to a database next to the harvester. So every connection,
documents, resources and the hub alike, resolves the host here and goes only
to an address that is public, inside `allowed_networks`, or one the hosts
named in `allowed_hosts` resolved to when the harvest started (a source on
localhost or the local network is harvested as configured; its subdomains
are not trusted with that).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from harvester.pace import Pace, PacedStream
from resourcesync_portal.addresses import IPNetwork, address_allowed, parse_address
from resourcesync_portal.streams import transport_with_backend


class Refused(Exception):
    """A request the harvest will not make; not worth a retry. `url` names it when known."""

    url: str | None = None


class AddressRefused(Refused):
    """A host resolves to no address the harvest may connect to."""


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def trusting(cls, hosts: Iterable[str], networks: Iterable[IPNetwork] = ()) -> AddressPolicy:
        """`networks`, and every address the named hosts resolve to now."""
        found = [ipaddress.ip_network(parse_address(a)) for h in hosts for a in _known(h)]
        return cls((*networks, *found))

    def addresses(self, host: str, port: int) -> list[str]:
        """The host's addresses this harvest may connect to, in the resolver's order."""
        try:
            found = _resolve(host, port)
        except OSError as error:
            raise OSError(f"{host} cannot be resolved: {error}") from error
        allowed = [a for a in found if address_allowed(parse_address(a), self.networks)]
        if not allowed:
            raise AddressRefused(
                f"{host} resolves to {', '.join(found)}: a private, loopback, link-local "
                "or reserved address, which only allowed_networks can open"
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
    return transport_with_backend(_CheckedBackend(policy, pace), limits)


class _CheckedBackend(httpcore.SyncBackend):
    """httpcore's sockets, opened to an address the policy allows (TLS still checks the name)."""

    def __init__(self, policy: AddressPolicy, pace: Callable[[], Pace] | None) -> None:
        self.policy = policy
        self.pace = pace

    def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        stream = self._connect_allowed(*args, **kwargs)
        return PacedStream(stream, self.pace()) if self.pace else stream

    def _connect_allowed(
        self, host: str, port: int, timeout: float | None = None, *args: Any, **kwargs: Any
    ) -> httpcore.NetworkStream:
        try:
            addresses = self.policy.addresses(host, port)
        except OSError as error:
            raise httpcore.ConnectError(str(error)) from error
        for address in addresses[:-1]:
            try:
                return super().connect_tcp(address, port, timeout, *args, **kwargs)
            except httpcore.ConnectError:
                continue
        return super().connect_tcp(addresses[-1], port, timeout, *args, **kwargs)


def _known(host: str) -> list[str]:
    """The host's addresses now; none when it cannot be resolved (it is then not trusted)."""
    try:
        return _resolve(host, 0)
    except OSError:
        return []


def _resolve(host: str, port: int) -> list[str]:
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))
