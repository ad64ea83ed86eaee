"""The harvester's WebSub callback: it confirms only its own intents and keeps only
notifications signed with its secret."""

from __future__ import annotations

import hashlib
import hmac
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import httpx
import pytest

from harvester.config import HarvestConfig, load_config
from harvester.follow import run_follow
from harvester.walk import HarvestError
from harvester.websub import CallbackHandler, CallbackServer, signature_valid

TOPIC = "http://source.example.org/resourcesync/a/b/notifications/change"


@pytest.fixture
def server(tmp_path: Path):
    config = HarvestConfig(source_url="http://source.example.org/", destination=tmp_path)
    with CallbackServer(config) as running:
        yield running


def sign(secret: str, body: bytes, method: str = "sha256") -> str:
    return f"{method}=" + hmac.new(secret.encode(), body, getattr(hashlib, method)).hexdigest()


def test_signature_methods_and_mismatches():
    body = b"<urlset/>"
    assert signature_valid("s", body, sign("s", body))
    assert signature_valid("s", body, sign("s", body, "sha512"))
    assert not signature_valid("s", body, sign("other", body))
    assert not signature_valid("s", body + b" ", sign("s", body))
    assert not signature_valid("s", body, None)
    assert not signature_valid("s", body, "md5=" + hashlib.md5(body).hexdigest())  # noqa: S324


def test_only_its_own_intent_is_confirmed(server: CallbackServer):
    params = {"hub.mode": "subscribe", "hub.topic": TOPIC, "hub.challenge": "xyz"}
    assert httpx.get(server.url, params=params).status_code == 404
    verified = server.state.expect("subscribe", TOPIC)
    answer = httpx.get(server.url, params=params)
    assert (answer.status_code, answer.text) == (200, "xyz")
    assert verified.is_set()


def test_an_intent_is_confirmed_before_the_hub_hears_it(
    server: CallbackServer, monkeypatch: pytest.MonkeyPatch
):
    """A subscriber that has the hub's 200 must find its intent confirmed, however the
    callback's thread is scheduled after it answered (CI once failed the test above)."""
    answered = threading.Event()
    answer = CallbackHandler._answer

    def answer_then_stall(handler: CallbackHandler, status: int, body: bytes = b"") -> None:
        answer(handler, status, body)
        handler.wfile.flush()
        answered.wait(5)  # the callback's thread is held until the client has looked

    monkeypatch.setattr(CallbackHandler, "_answer", answer_then_stall)
    verified = server.state.expect("subscribe", TOPIC)
    params = {"hub.mode": "subscribe", "hub.topic": TOPIC, "hub.challenge": "xyz"}
    response = httpx.get(server.url, params=params)
    seen = verified.is_set()
    answered.set()
    assert (response.status_code, seen) == (200, True)


def test_notifications_without_our_signature_are_acknowledged_and_dropped(
    server: CallbackServer,
):
    body = b"<urlset>payload</urlset>"
    assert httpx.post(server.url, content=body).status_code == 204
    forged = {"X-Hub-Signature": sign("guess", body)}
    assert httpx.post(server.url, content=body, headers=forged).status_code == 204
    assert server.state.notifications.empty()
    assert server.state.rejected == 2

    signed = {"X-Hub-Signature": sign(server.state.secret, body)}
    assert httpx.post(server.url, content=body, headers=signed).status_code == 204
    assert server.state.notifications.get_nowait() == body


class _Recorder(BaseHTTPRequestHandler):
    """A listener that records every POST and refuses it; GET serves `self.server.body`."""

    def do_GET(self) -> None:
        body = self.server.body  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.server.posts.append(self.path)  # type: ignore[attr-defined]
        self.send_response(400)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def listening(body: bytes = b"") -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.body, server.posts = body, []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def capability_list(source: str, hub: str) -> bytes:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:md capability="capabilitylist"/>
  <url><loc>{source}/changelist.xml</loc><rs:md capability="changelist"/></url>
  <url><loc>{source}/notifications/change</loc><rs:ln rel="hub" href="{hub}"/>
    <rs:md capability="change-notification"/></url>
</urlset>""".encode()


@pytest.mark.parametrize("hub_allowed", [False, True], ids=["not-allowed", "in-allowed-hosts"])
def test_a_hub_the_source_names_on_a_private_address_is_posted_to_only_on_an_allowed_host(
    tmp_path: Path, hub_allowed: bool
):
    """Else a hostile Capability List makes --follow POST to another port of the
    source's host, or anywhere in allowed_networks."""
    with listening() as hub, listening() as source:
        hub_origin = f"http://127.0.0.1:{hub.server_address[1]}"
        source_origin = f"http://127.0.0.1:{source.server_address[1]}"
        source.body = capability_list(source_origin, hub_origin + "/internal/delete")  # type: ignore[attr-defined]
        allowed = (
            f"allowed_hosts: ['{source_origin}', '{hub_origin}']"
            if hub_allowed
            else "allowed_networks: ['127.0.0.0/8']"  # opens no hub outside allowed_hosts
        )
        config = tmp_path / "harvest.yaml"
        config.write_text(
            f"capability_list_url: {source_origin}/capabilitylist.xml\n"
            f"destination: {tmp_path / 'mirror'}\nretries: 0\ntimeout: 5\n{allowed}\n"
        )

        with pytest.raises(HarvestError) as refused:
            run_follow(load_config(config), notify=lambda line: None)

    assert hub.posts == (["/internal/delete"] if hub_allowed else [])  # type: ignore[attr-defined]
    expected = (
        "refused to subscribe: HTTP 400"
        if hub_allowed
        else "the hub is outside allowed_hosts: add its origin there"
    )
    assert expected in str(refused.value)


def test_a_callback_url_with_a_query_keeps_it_after_the_unguessable_path(tmp_path: Path):
    """WebSub §5.1.1: a callback may carry a query, and the hub appends its own to it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = HarvestConfig(
        source_url="http://source.example.org/",
        destination=tmp_path,
        callback_port=port,
        callback_url=f"http://127.0.0.1:{port}/hooks?tenant=acme",
    )
    with CallbackServer(config) as server:
        parts = urlsplit(server.url)
        assert parts.path.startswith("/hooks/websub/") and parts.query == "tenant=acme"
        verified = server.state.expect("subscribe", TOPIC)
        params = {"hub.mode": "subscribe", "hub.topic": TOPIC, "hub.challenge": "xyz"}
        answer = httpx.get(f"{server.url}&{urlencode(params)}")  # as a hub appends them
    assert (answer.status_code, answer.text) == (200, "xyz")
    assert verified.is_set()


def test_requests_off_the_unguessable_path_are_not_answered(server: CallbackServer):
    """The path is what keeps others who reach the port from confirming our intents or
    telling us the hub denied them: the topic is public, the path is not."""
    verified = server.state.expect("subscribe", TOPIC)
    elsewhere = urlsplit(server.url)._replace(path="/").geturl()
    params = {"hub.mode": "subscribe", "hub.topic": TOPIC, "hub.challenge": "xyz"}
    assert httpx.get(elsewhere, params=params).status_code == 404
    denial = {"hub.mode": "denied", "hub.topic": TOPIC, "hub.reason": "forged"}
    assert httpx.get(elsewhere, params=denial).status_code == 404
    assert httpx.post(elsewhere, content=b"<urlset/>").status_code == 404
    assert not verified.is_set()
    assert server.state.denied == ""
    assert server.state.rejected == 0


@pytest.mark.parametrize(("length", "status"), [("-1", 400), ("12x", 400), ("", 411)])
def test_a_post_whose_length_is_not_a_number_of_bytes_is_refused_unread(
    tmp_path: Path, length: str, status: int
):
    """`Content-Length: -1` read the body to the end of the connection, whatever its size,
    past max_document_bytes; an unreadable one failed the handler, and a chunked body was
    taken for an empty one."""
    config = HarvestConfig(
        source_url="http://source.example.org/", destination=tmp_path, max_document_bytes=1000
    )
    with CallbackServer(config) as server:
        parts = urlsplit(server.url)
        with socket.create_connection((parts.hostname, parts.port), timeout=5) as connection:
            header = f"Content-Length: {length}\r\n" if length else "Transfer-Encoding: chunked\r\n"
            connection.sendall(
                f"POST {parts.path} HTTP/1.1\r\nHost: x\r\n{header}\r\n".encode() + b"x" * 5000
            )
            connection.shutdown(socket.SHUT_WR)
            answer = connection.recv(100)
    assert answer.split(b" ", 2)[1] == str(status).encode(), answer
    assert server.state.rejected == 0
