"""httpx transports whose connections a module of ours shapes (httpcore's network backend).

httpx has no hook between it and the socket; httpcore has, its network
backend. The harvester uses one to connect only to allowed addresses and to
fail answers that trickle, the hub's deliveries to bound a whole answer's time.
"""

from __future__ import annotations

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


def transport_with_backend(
    backend: httpcore.NetworkBackend, limits: httpx.Limits
) -> httpx.HTTPTransport:
    """An httpx transport (certificates verified, no proxy) whose sockets `backend` opens."""
    transport = httpx.HTTPTransport(limits=limits, trust_env=False)
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=backend,
    )
    return transport
