"""The HTTP/1.1 wire format for one keep-alive connection: GET out, an answer in.

`http.client` parses each answer's headers with the `email` package and
wraps the socket anew per answer, about half its cost per small GET; a
harvest only ever sends GETs, so this reads status, headers and the body's
framing (Content-Length, chunked, or until close, RFC 9112 § 6) itself, with
`http.client`'s limits on line length and header count. Anything malformed
is a `ProtocolError`; the connection is then closed, never reused.
"""

from __future__ import annotations

import io
import re
import socket
import ssl
from collections.abc import Callable
from urllib.parse import quote

from harvester.pace import Pace, paced_reader

#: As http.client: the longest status or header line, and the most header lines.
MAX_LINE = 65_536
MAX_HEADERS = 100
#: Answers to a GET that have no body whatever their headers say.
_NO_BODY = frozenset({204, 304})
#: Characters left as they are in a request target (every reserved one and `%`);
#: spaces, controls and non-ASCII are percent-encoded as httpx does.
_TARGET_SAFE = "/?#[]@!$&'()*+,;=:%~-._"
_HEADER_INJECTION = re.compile(r"[\r\n\x00]")
#: Acknowledge the answer's first segment at once (Linux; re-armed per GET, as the kernel
#: drops it). A server that writes the head, then the body (Django's runserver), with
#: Nagle on holds the body until the head is acknowledged, and Linux delays that ACK on
#: a kept-alive connection: 40 ms a GET, 23 a second where a fresh connection does 390.
_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)


def _acknowledge_quickly(sock: socket.socket) -> None:
    """Set `_QUICKACK` where the system has it; stop trying where it is refused."""
    global _QUICKACK
    if _QUICKACK is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        except OSError:  # a sandbox or kernel without it: no reason to fail a GET
            _QUICKACK = None


class ProtocolError(Exception):
    """The answer does not follow HTTP/1.1 (or the connection ended inside it)."""


class StaleConnection(ProtocolError):
    """The server closed the connection before answering: a reused one had gone idle."""


class Headers(dict[str, str]):
    """Header names in lower case; `get` ignores the case of the name asked for."""

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(name.lower(), default)

    def value(self, name: str) -> str:
        """The header's value, or "" when it is absent."""
        return super().get(name.lower(), "")


class Connection:
    """A socket to one origin and its buffered reader, opened on first use."""

    def __init__(
        self,
        scheme: str,
        host: str,
        port: int,
        *,
        timeout: float,
        tls: Callable[[], ssl.SSLContext],
        connect: Callable[[str, int, float], socket.socket],
        pace: Pace,
    ) -> None:
        self.scheme, self.host, self.port = scheme, host, port
        self.timeout = timeout
        self._tls = tls
        self._connect = connect
        self._pace = pace
        self._socket: socket.socket | None = None
        self._reader: io.BufferedReader | None = None
        default = 443 if scheme == "https" else 80
        name = f"[{host}]" if ":" in host else host
        self.host_header = name if port == default else f"{name}:{port}"

    @property
    def is_open(self) -> bool:
        """Whether a socket is open (so a GET reuses it)."""
        return self._socket is not None

    def close(self) -> None:
        """Close the socket; the next GET opens a new one."""
        reader, sock = self._reader, self._socket
        self._reader = self._socket = None
        if reader is not None:
            reader.close()
        if sock is not None:
            sock.close()

    def get(self, target: str, headers: dict[str, str]) -> Response:
        """Send a GET for `target` (path and query) and read the answer's head."""
        request = self._request_bytes(target, headers)
        if self._socket is None:
            self._open()
        assert self._socket is not None
        self._pace.restart()
        try:
            self._socket.sendall(request)
        except (BrokenPipeError, ConnectionResetError) as error:
            raise StaleConnection(str(error)) from error
        _acknowledge_quickly(self._socket)
        return self._read_head()

    def _open(self) -> None:
        sock = self._connect(self.host, self.port, self.timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.scheme == "https":
                sock = self._tls().wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        self._socket = sock
        self._reader = paced_reader(sock, self._pace)

    def _request_bytes(self, target: str, headers: dict[str, str]) -> bytes:
        lines = [f"GET {quote(target, safe=_TARGET_SAFE)} HTTP/1.1", f"Host: {self.host_header}"]
        for name, value in headers.items():
            if _HEADER_INJECTION.search(name) or _HEADER_INJECTION.search(value):
                raise ValueError(f"invalid header {name!r}")
            lines.append(f"{name}: {value}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _read_head(self) -> Response:
        assert self._reader is not None
        while True:
            first = self._reader.readline(MAX_LINE + 1)
            if not first:
                raise StaleConnection("the server closed the connection without answering")
            version, status = _status_line(first)
            headers = _read_headers(self._reader)
            if not 100 <= status < 200:
                return Response(self, self._reader, version, status, headers)


class Response:
    """One answer: status, headers, and its body read through `read` in its framing."""

    def __init__(
        self,
        connection: Connection,
        reader: io.BufferedReader,
        version: str,
        status: int,
        headers: Headers,
    ) -> None:
        self.connection = connection
        self.status = status
        self.headers = headers
        self._reader = reader
        tokens = {token.strip().lower() for token in headers.value("Connection").split(",")}
        self.reusable = version == "HTTP/1.1" and "close" not in tokens
        self._chunked = False
        self._remaining: int | None = None  # bytes left of a Content-Length body or chunk
        self.complete = False
        self._frame(headers)

    def _frame(self, headers: Headers) -> None:
        if self.status in _NO_BODY:
            self.complete = True
        elif "chunked" in headers.value("Transfer-Encoding").lower():
            self._chunked = True
            self._remaining = 0
        elif (length := headers.get("Content-Length")) is not None:
            values = {value.strip() for value in length.split(",")}
            if len(values) != 1 or not (value := values.pop()).isdigit():
                raise ProtocolError(f"invalid Content-Length {length!r}")
            self._remaining = int(value)
            self.complete = self._remaining == 0
        else:
            self.reusable = False  # the body ends when the connection does

    @property
    def unread(self) -> int | None:
        """Bytes of a Content-Length body not read yet (None for other framings)."""
        return None if self._chunked else self._remaining

    def read(self, size: int) -> bytes:
        """Up to `size` bytes of the body; b"" once it is complete."""
        if self.complete:
            return b""
        if self._chunked:
            return self._read_chunked(size)
        if self._remaining is None:
            data = self._reader.read(size)
            self.complete = not data
            return data
        data = self._reader.read(min(size, self._remaining))
        if not data:
            raise ProtocolError(f"the connection closed {self._remaining} bytes before the end")
        self._remaining -= len(data)
        self.complete = self._remaining == 0
        return data

    def _read_chunked(self, size: int) -> bytes:
        assert self._remaining is not None
        if self._remaining == 0:
            self._remaining = self._chunk_size()
            if self._remaining == 0:
                _read_headers(self._reader)  # trailers, ignored
                self.complete = True
                return b""
        data = self._reader.read(min(size, self._remaining))
        if not data:
            raise ProtocolError("the connection closed inside a chunk")
        self._remaining -= len(data)
        if self._remaining == 0 and self._reader.read(2) != b"\r\n":
            raise ProtocolError("a chunk does not end with CRLF")
        return data

    def _chunk_size(self) -> int:
        line = self._reader.readline(MAX_LINE + 1)
        size = line.split(b";", 1)[0].strip()
        try:
            return int(size, 16)
        except ValueError:
            raise ProtocolError(f"invalid chunk size {line[:40]!r}") from None


def _status_line(line: bytes) -> tuple[str, int]:
    if len(line) > MAX_LINE:
        raise ProtocolError("the status line is too long")
    parts = line.decode("latin-1").split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"invalid status line {line[:80]!r}")
    return parts[0], int(parts[1])


def _read_headers(reader: io.BufferedReader) -> Headers:
    headers = Headers()
    name = ""
    for _ in range(MAX_HEADERS + 1):
        line = reader.readline(MAX_LINE + 1)
        if line in (b"\r\n", b"\n"):
            return headers
        if not line:
            raise ProtocolError("the connection closed inside the headers")
        if len(line) > MAX_LINE:
            raise ProtocolError("a header line is too long")
        text = line.decode("latin-1")
        if text[0] in " \t" and name:  # obsolete line folding: continues the last value
            headers[name] = f"{headers[name]} {text.strip()}"
            continue
        raw_name, colon, value = text.partition(":")
        if not colon:
            raise ProtocolError(f"invalid header line {line[:80]!r}")
        name, value = raw_name.strip().lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    raise ProtocolError(f"more than {MAX_HEADERS} headers")
