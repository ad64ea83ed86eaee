"""httpx transports whose connections a module of ours shapes (httpcore's network backend).

httpx has no hook between it and the socket; httpcore has, its network
backend. The harvester uses one to connect only to allowed addresses and to
fail answers that trickle, the hub's deliveries to bound a whole answer's time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpcore
import httpx


class StreamWrapper(httpcore.NetworkStream):
    """A stream that passes everything on; subclasses override `read` and `write`."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self.stream = stream

    def rewrap(self, stream: httpcore.NetworkStream) -> httpcore.NetworkStream:
        """The same wrapping around `stream` (the TLS stream that replaces ours)."""
        raise NotImplementedError

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.stream.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, timeout)

    def close(self) -> None:
        self.stream.close()

    def start_tls(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        return self.rewrap(self.stream.start_tls(*args, **kwargs))

    def get_extra_info(self, info: str) -> Any:
        return self.stream.get_extra_info(info)


class CheckedBackend(httpcore.SyncBackend):
    """httpcore's sockets, opened only to the addresses `addresses` allows for a host.

    The pool still keys connections by host name, and TLS checks the name:
    only the address is chosen here.
    """

    def addresses(self, host: str, port: int) -> list[str]:
        """The host's addresses to try, in order; raise to refuse the connection."""
        raise NotImplementedError

    def wrap(self, stream: httpcore.NetworkStream) -> httpcore.NetworkStream:
        """The stream as the caller reads it (a deadline, a pace); as is by default."""
        return stream

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = self.addresses(host, port)
        for address in addresses[:-1]:  # each in turn, as socket.create_connection does
            try:
                stream = super().connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout):
                continue
            return self.wrap(stream)
        last = super().connect_tcp(addresses[-1], port, timeout, local_address, socket_options)
        return self.wrap(last)


def transport_with_backend(
    backend: httpcore.NetworkBackend, limits: httpx.Limits
) -> httpx.HTTPTransport:
    """An httpx transport (certificates verified, no proxy) whose sockets `backend` opens."""
    transport = httpx.HTTPTransport(limits=limits, trust_env=False)
    # httpx has no public way to hand its pool a backend. Should an upgrade rename
    # the attribute, fail here rather than send requests nothing checks.
    if not isinstance(getattr(transport, "_pool", None), httpcore.ConnectionPool):
        raise RuntimeError("httpx.HTTPTransport no longer keeps an httpcore pool in _pool")
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=backend,
    )
    return transport
