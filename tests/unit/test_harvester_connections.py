"""Resource GETs on kept-alive connections: framing, reuse, redirects, where the token goes.

The client speaks to a real socket here (a scripted server on 127.0.0.1), since
this is the path that `httpx.MockTransport` never reaches.
"""

from __future__ import annotations

import gzip
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harvester.client import FetchError, HarvestClient
from harvester.concurrency import batch_size, map_bounded
from harvester.config import config_from_mapping

Answer = Callable[[str, dict[str, str]], bytes | None]


class ScriptedServer:
    """Answers each request with the bytes `answer(path, headers)` gives (None: hang up)."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.connections = 0
        #: Close the connection after each answer (an answer cut short stays cut).
        self.hang_up_after = False
        #: Send the head and the body in two writes, as Django's runserver does.
        self.head_apart = False
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._talk, args=(sock,), daemon=True).start()

    def _talk(self, sock: socket.socket) -> None:
        reader = sock.makefile("rb")
        with sock, reader:
            while line := reader.readline():
                path = line.split()[1].decode()
                headers = {}
                while (header := reader.readline()) not in (b"\r\n", b""):
                    name, _, value = header.decode().partition(":")
                    headers[name.strip().lower()] = value.strip()
                self.requests.append((path, headers))
                reply = self.answer(path, headers)
                if reply is None:
                    return
                if self.head_apart:
                    head, _, body = reply.partition(b"\r\n\r\n")
                    sock.sendall(head + b"\r\n\r\n")
                    reply = body
                sock.sendall(reply)
                if self.hang_up_after:
                    return

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(answer: Answer) -> ScriptedServer:
        servers.append(ScriptedServer(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def answer(status: int, body: bytes = b"", **headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    if "Transfer_Encoding" not in headers:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def client_for(server: ScriptedServer, **settings: object) -> HarvestClient:
    config = config_from_mapping(
        {
            "capability_list_url": server.url("/capabilitylist.xml"),
            "destination": "mirror",
            "retries": 1,
            "backoff": 0,
            **settings,
        },
        base_dir=Path("/tmp"),
    )
    return HarvestClient(config, sleep=lambda _: None)


def body_of(client: HarvestClient, url: str) -> bytes:
    return client.fetch(url, lambda response: b"".join(response.iter_bytes()))


def test_small_gets_share_one_kept_alive_connection(serve) -> None:
    server = serve(lambda path, headers: answer(200, path.encode()))
    with client_for(server) as client:
        bodies = [body_of(client, server.url(f"/r/{n}")) for n in range(5)]

    assert bodies == [f"/r/{n}".encode() for n in range(5)]
    assert server.connections == 1


@pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"), reason="Linux's delayed ACK")
def test_a_server_sending_head_and_body_apart_answers_without_delay(serve) -> None:
    """Such a server (Django's runserver: `make run`) holds a small body back until the
    head is acknowledged (Nagle), and Linux delays that ACK by 40 ms on a kept-alive
    connection: 23 GETs a second, a harvest of the demo set 4x slower than resync's."""
    server = serve(lambda path, headers: answer(200, b"x" * 200))
    server.head_apart = True
    waits = []
    with client_for(server) as client:
        for n in range(15):
            start = time.perf_counter()
            assert body_of(client, server.url(f"/r/{n}")) == b"x" * 200
            waits.append(time.perf_counter() - start)

    assert server.connections == 1
    assert statistics.median(waits) < 0.02, waits  # 0.04 s a GET when it waits


def test_chunked_and_compressed_bodies_are_decoded(serve) -> None:
    packed = gzip.compress(b"hello, chunked world")
    chunks = b"".join(
        f"{len(part):x}\r\n".encode() + part + b"\r\n" for part in (packed[:7], packed[7:])
    )
    server = serve(
        lambda path, headers: answer(
            200, chunks + b"0\r\n\r\n", Transfer_Encoding="chunked", Content_Encoding="gzip"
        )
    )
    with client_for(server) as client:
        assert body_of(client, server.url("/a")) == b"hello, chunked world"
        assert body_of(client, server.url("/b")) == b"hello, chunked world"

    assert server.connections == 1


def test_a_connection_the_server_closed_while_idle_is_opened_again(serve) -> None:
    served: list[str] = []

    def hang_up_after_each(path: str, headers: dict[str, str]) -> bytes | None:
        if path in served:
            return None
        served.append(path)
        return answer(200, b"ok")

    server = serve(hang_up_after_each)
    with client_for(server, retries=0) as client:
        assert body_of(client, server.url("/a")) == b"ok"
        # The server answers /a again on the kept connection by hanging up: one new
        # connection, not a failure (retries: 0).
        assert body_of(client, server.url("/b")) == b"ok"


def test_a_body_cut_short_is_retried_then_fails_clearly(serve) -> None:
    server = serve(lambda path, headers: b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
    server.hang_up_after = True

    with client_for(server) as client, pytest.raises(FetchError) as raised:
        body_of(client, server.url("/a"))

    assert "95 bytes before the end (gave up after 2 attempts)" in str(raised.value)
    assert len(server.requests) == 2


def test_redirects_are_followed_only_to_allowed_origins(serve) -> None:
    outside = serve(lambda path, headers: answer(200, b"internal"))
    server = serve(
        lambda path, headers: answer(302, Location=outside.url("/admin"))
        if path == "/away"
        else answer(301, Location="/final")
        if path == "/moved"
        else answer(200, b"final")
    )
    with client_for(server) as client:
        assert body_of(client, server.url("/moved")) == b"final"
        with pytest.raises(FetchError, match="redirected to a host that is not allowed"):
            body_of(client, server.url("/away"))

    assert outside.requests == []


def test_the_token_goes_to_the_source_origin_only_also_across_redirects(serve) -> None:
    mirror = serve(lambda path, headers: answer(200, b"copy"))
    server = serve(lambda path, headers: answer(302, Location=mirror.url("/copy")))
    hosts = [f"127.0.0.1:{server.port}", f"127.0.0.1:{mirror.port}"]
    with client_for(server, bearer_token="s3cret", allowed_hosts=hosts) as client:
        assert body_of(client, server.url("/a")) == b"copy"

    assert server.requests[0][1]["authorization"] == "Bearer s3cret"
    assert "authorization" not in mirror.requests[0][1]


def test_errors_are_statuses_and_5xx_are_retried(serve) -> None:
    statuses = [503, 200]
    server = serve(
        lambda path, headers: answer(404) if path == "/gone" else answer(statuses.pop(0), b"ok")
    )
    with client_for(server) as client:
        with pytest.raises(FetchError) as raised:
            body_of(client, server.url("/gone"))
        assert raised.value.gone
        assert body_of(client, server.url("/flaky")) == b"ok"

    assert server.connections == 1  # error answers were read to their end, not hung up on


def test_request_targets_are_percent_encoded_and_headers_cannot_be_injected(serve) -> None:
    server = serve(lambda path, headers: answer(200, b"ok"))
    with client_for(server) as client:
        assert body_of(client, server.url("/a b/é?x=1 2")) == b"ok"
        assert server.requests[-1][0] == "/a%20b/%C3%A9?x=1%202"
        with pytest.raises(FetchError, match="invalid header"):
            client.fetch(server.url("/a"), bytes, headers={"Range": "bytes=0-\r\nX-Evil: 1"})


def test_work_is_batched_yet_every_item_comes_back_once() -> None:
    consumed: list[int] = []

    def items() -> Iterator[int]:
        for n in range(1000):
            consumed.append(n)
            yield n

    first = next(map_bounded(2, items(), lambda n: n * 2))
    assert len(consumed) < 1000  # not everything queued at once

    results = dict(map_bounded(3, list(range(1000)), lambda n: n * 2))
    assert results == {n: n * 2 for n in range(1000)}
    assert first[1] == first[0] * 2
    assert batch_size(4, 10) == 1  # a few large files still go to every worker
    assert batch_size(4, 100_000) == 32


def sockets_to(port: int) -> int:
    """This process's open sockets connected to 127.0.0.1:`port` (Linux /proc)."""
    inodes = {
        target.removeprefix("socket:[").removesuffix("]")
        for fd in Path("/proc/self/fd").iterdir()
        if (target := _readlink(fd)).startswith("socket:[")
    }
    remote = f"0100007F:{port:04X}"
    rows = Path("/proc/self/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[2] == remote and row.split()[9] in inodes)


def _readlink(fd: Path) -> str:
    try:
        return str(fd.readlink())
    except OSError:  # the fd of the directory listing itself, already closed
        return ""


@pytest.mark.skipif(not Path("/proc/self/net/tcp").exists(), reason="counts sockets via /proc")
def test_repeated_downloads_on_one_client_keep_no_more_sockets_than_workers(serve) -> None:
    # `harvest --follow` keeps one client and downloads once per notification,
    # each time on a new thread pool: sockets of finished threads must not pile up.
    server = serve(lambda path, headers: answer(200, b"ok"))
    workers, calls, per_call = 4, 12, 40
    urls = [server.url(f"/r/{n}") for n in range(per_call)]
    with client_for(server) as client:
        for _ in range(calls):
            results = dict(map_bounded(workers, urls, lambda url: body_of(client, url)))
            assert set(results.values()) == {b"ok"}
            assert sockets_to(server.port) <= workers

    assert sockets_to(server.port) == 0  # close() closes what is left
    assert len(server.requests) == calls * per_call
    assert server.connections <= calls * workers  # kept alive within a call
