"""A source that trickles its answer cannot hold a harvest (and its lock) for hours."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harvester.client import FetchError, HarvestClient
from harvester.config import config_from_mapping
from harvester.pace import Pace, TooSlow
from tests.support import accept_forever

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: 40\r\n\r\n"
BODY = b"<urlset xmlns='x'>" + b" " * 16 + b"</u>\r\n"


class Trickler:
    """Sends `HEAD + BODY` to every GET, `pause` seconds before each of its chunks."""

    def __init__(self, chunks: list[bytes], pause: float) -> None:
        self.chunks, self.pause = chunks, pause
        self.listener = accept_forever(self._answer)
        self.port = self.listener.getsockname()[1]

    def _answer(self, sock: socket.socket) -> None:
        with sock:
            sock.recv(65536)
            try:
                for chunk in self.chunks:
                    time.sleep(self.pause)
                    sock.sendall(chunk)
            except OSError:
                return


@pytest.fixture
def trickle() -> Iterator[type[Trickler]]:
    servers: list[Trickler] = []

    def start(chunks: list[bytes], pause: float) -> Trickler:
        servers.append(Trickler(chunks, pause))
        return servers[-1]

    yield start  # type: ignore[misc]
    for server in servers:
        server.listener.close()


def client_for(server: Trickler) -> HarvestClient:
    config = config_from_mapping(
        {
            "capability_list_url": f"http://127.0.0.1:{server.port}/capabilitylist.xml",
            "destination": "mirror",
            "timeout": 0.5,
            "min_rate": 100,
            "retries": 0,
        },
        base_dir=Path("/tmp"),
    )
    return HarvestClient(config, sleep=lambda _: None)


def one_byte_at_a_time(data: bytes) -> list[bytes]:
    return [data[n : n + 1] for n in range(len(data))]


@pytest.mark.parametrize(
    "chunks",
    [[HEAD, *one_byte_at_a_time(BODY)], one_byte_at_a_time(HEAD + BODY)],
    ids=["trickled body", "trickled head"],
)
def test_an_answer_slower_than_min_rate_fails_within_a_few_windows(trickle, chunks) -> None:
    server = trickle(chunks, pause=0.1)  # 10 bytes/s: each read is well inside the timeout
    url = f"http://127.0.0.1:{server.port}/resourcelist.xml"
    with client_for(server) as client:
        for fetch in (
            client.fetch_document,
            lambda url: client.fetch(url, lambda r: b"".join(r.iter_bytes())),
        ):
            started = time.monotonic()
            with pytest.raises(FetchError, match="min_rate"):
                fetch(url)
            assert time.monotonic() - started < 3  # the whole answer takes 12 s


def test_a_slow_start_then_a_quick_answer_is_read(trickle) -> None:
    """The wait for the first byte is the read timeout's business, not the rate's."""
    server = trickle([HEAD + BODY], pause=0.4)
    url = f"http://127.0.0.1:{server.port}/resourcelist.xml"
    with client_for(server) as client:
        assert client.fetch_document(url) == BODY
        assert client.fetch(url, lambda r: b"".join(r.iter_bytes())) == BODY


def test_each_window_must_bring_its_share() -> None:
    now = [0.0]
    pace = Pace(min_rate=100, window=10, clock=lambda: now[0])
    pace.count(5)  # the first byte opens the window
    now[0] = 5
    pace.count(1000)
    now[0] = 10
    pace.count(1)  # the first window is over with 1,005 bytes; the second opens with 1 ...
    now[0] = 20
    with pytest.raises(TooSlow, match="1 bytes in 10 s"):
        pace.count(0)  # ... and ends with it


def test_a_new_request_opens_a_new_window() -> None:
    """Idle time on a kept-alive connection between two answers is no slowness."""
    now = [0.0]
    pace = Pace(min_rate=100, window=10, clock=lambda: now[0])
    pace.count(1)
    now[0] += 60
    pace.restart()
    pace.count(1)
    now[0] += 5
    pace.count(1)
