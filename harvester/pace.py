"""A download must keep moving: at least `min_rate` bytes a second over each window.

`timeout` bounds each read, so a source sending a byte every few seconds
kept one GET alive for hours (and the harvest's lock with it, so the next
cron run failed). Like curl's low-speed limit, each connection counts what
it receives from the first byte of an answer on; a window (of `timeout`
seconds) that ends with fewer than `min_rate * window` bytes fails the GET
as a timeout, which is retried like any other. A slow start is the read
timeout's business, and an answer shorter than one window's worth never
reaches a check.
"""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Callable
from typing import Any

import httpcore

from resourcesync_portal.streams import StreamWrapper


class TooSlow(TimeoutError):
    """An answer arrived more slowly than the harvest accepts."""


class Pace:
    """Counts one connection's received bytes, window by window, per request."""

    def __init__(
        self, min_rate: float, window: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.min_bytes = min_rate * window
        self.window = window
        self._clock = clock
        self._start: float | None = None
        self._received = 0

    def restart(self) -> None:
        """A request was sent: its answer's first byte opens the first window."""
        self._start = None

    def count(self, received: int) -> None:
        """Record a read; TooSlow once a window has ended short of the minimum."""
        now = self._clock()
        if self._start is None:
            self._start, self._received = now, 0
        elif now - self._start >= self.window:
            if self._received < self.min_bytes:
                raise TooSlow(
                    f"the answer brought {self._received} bytes in {now - self._start:.0f} s, "
                    f"slower than min_rate ({self.min_bytes / self.window:.0f} bytes/s)"
                )
            self._start, self._received = now, 0
        self._received += received


class PacedSocketIO(socket.SocketIO):
    """A socket's reads, counted by a Pace (for `harvester.http1`'s buffered reader)."""

    def __init__(self, sock: socket.socket, pace: Pace) -> None:
        super().__init__(sock, "rb")
        self.pace = pace

    def readinto(self, buffer: Any) -> int | None:
        received = super().readinto(buffer)
        self.pace.count(received or 0)
        return received


def paced_reader(sock: socket.socket, pace: Pace) -> io.BufferedReader:
    return io.BufferedReader(PacedSocketIO(sock, pace))


class PacedStream(StreamWrapper):
    """An httpcore stream whose reads a Pace counts (documents go through httpx)."""

    def __init__(self, stream: httpcore.NetworkStream, pace: Pace) -> None:
        super().__init__(stream)
        self.pace = pace

    def rewrap(self, stream: httpcore.NetworkStream) -> httpcore.NetworkStream:
        return PacedStream(stream, self.pace)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self.stream.read(max_bytes, timeout)
        try:
            self.pace.count(len(data))
        except TooSlow as error:
            raise httpcore.ReadTimeout(str(error)) from error
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.pace.restart()
        self.stream.write(buffer, timeout)
