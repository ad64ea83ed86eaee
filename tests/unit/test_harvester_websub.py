"""The harvester's WebSub callback: it confirms only its own intents and keeps only
notifications signed with its secret."""

from __future__ import annotations

import hashlib
import hmac
import threading
from pathlib import Path

import httpx
import pytest

from harvester.config import HarvestConfig
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
