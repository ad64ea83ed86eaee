"""Publishing through an external WebSub hub: flask-websub, run as a real server.

With RESOURCESYNC_NOTIFICATIONS["HUB_URL"] set, the Capability List and the
topics name that hub, the embedded one answers 404, and each new payload is
announced to the hub with `hub.mode=publish`; the hub fetches the topic (its
Link header names the hub and itself) and delivers it, signed, to the
subscriber, which subscribed at the hub it discovered.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sources.models import ApiToken
from tests.conftest import REPO
from tests.support import assert_valid, event, ingest, make_set
from tests.websub_subscriber import Subscriber, discover, subscribe_form

from .test_notifications import SECRET, entries

pytestmark = pytest.mark.django_db(transaction=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def external_hub(tmp_path: Path):
    port = free_port()
    server = [sys.executable, "-m", "tests.integration.websub_hub_server"]
    log = (tmp_path / "hub.log").open("wb")
    process = subprocess.Popen(
        [*server, str(port), str(tmp_path / "hub.sqlite3")],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/hub"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.post(url, data={}, timeout=1)
            break
        except httpx.TransportError:
            assert process.poll() is None, (tmp_path / "hub.log").read_text()
            assert time.monotonic() < deadline, "flask-websub's hub did not start"
            time.sleep(0.1)
    yield url
    process.terminate()
    process.wait(10)
    log.close()


@pytest.fixture
def portal(live_server, settings, external_hub: str) -> str:
    settings.PUBLIC_BASE_URL = live_server.url
    settings.RESOURCESYNC_NOTIFICATIONS = {
        **settings.RESOURCESYNC_NOTIFICATIONS,
        "HUB_URL": external_hub,
    }
    return live_server.url


def test_a_third_party_hub_distributes_the_portals_change_notifications(
    portal: str, external_hub: str
) -> None:
    resource_set = make_set(publish_notifications=True)
    capability_list = httpx.get(f"{portal}/resourcesync/acme/articles/capabilitylist.xml").content
    topic, hub_url = discover(capability_list)
    assert hub_url == external_hub
    head = httpx.head(topic)
    assert head.headers["Link"] == f'<{topic}>; rel="self", <{external_hub}>; rel="hub"'

    subscriber = Subscriber(secret=SECRET).start()
    try:
        subscriber.intend("subscribe", topic)
        form = subscribe_form("subscribe", topic, subscriber.url, secret=SECRET, lease_seconds=600)
        assert httpx.post(hub_url, data=form, timeout=10).status_code == 202
        assert subscriber.verifications[-1]["hub.topic"] == topic

        ingest(resource_set, [event("created", "via-hub.txt")])

        (received,) = subscriber.wait_for(1, timeout=15)
        assert received.signature_valid is True
        assert received.headers["X-Hub-Signature"].startswith("sha256=")
        assert_valid(received.body)
        assert entries(received.body) == [("http://data.example.org/via-hub.txt", "created")]
    finally:
        subscriber.stop()


def test_the_embedded_hub_is_off_when_an_external_one_is_named(portal: str) -> None:
    make_set(publish_notifications=True)
    topic = f"{portal}/resourcesync/acme/articles/notifications/change"
    form = subscribe_form("subscribe", topic, "http://127.0.0.1:9/cb")
    assert httpx.post(f"{portal}/resourcesync/hub", data=form).status_code == 404


def test_protected_sets_are_not_published_to_an_external_hub(portal: str) -> None:
    from notifications import external

    secret_set = make_set(slug="private", protected=True, publish_notifications=True)
    ApiToken.issue(provider=secret_set.provider)
    assert external.publish(secret_set, "change") is False


def test_a_hub_url_with_a_query_is_published_and_posted_to_as_given(
    live_server, settings, external_hub: str
) -> None:
    """WebSub sets no rule on a hub's URL: one with a query (a tenant, a key) is named in
    the Capability List and the topic's Link header, and publishing and subscribing reach it."""
    hub = f"{external_hub}?tenant=acme&v=2"
    settings.PUBLIC_BASE_URL = live_server.url
    settings.RESOURCESYNC_NOTIFICATIONS = {**settings.RESOURCESYNC_NOTIFICATIONS, "HUB_URL": hub}
    resource_set = make_set(publish_notifications=True)
    url = f"{live_server.url}/resourcesync/acme/articles/capabilitylist.xml"
    capability_list = httpx.get(url).content
    assert_valid(capability_list)
    topic, hub_url = discover(capability_list)
    assert hub_url == hub
    assert httpx.head(topic).headers["Link"] == f'<{topic}>; rel="self", <{hub}>; rel="hub"'

    subscriber = Subscriber(secret=SECRET).start()
    try:
        subscriber.intend("subscribe", topic)
        form = subscribe_form("subscribe", topic, subscriber.url, secret=SECRET, lease_seconds=600)
        assert httpx.post(hub_url, data=form, timeout=10).status_code == 202
        ingest(resource_set, [event("created", "via-hub.txt")])
        (received,) = subscriber.wait_for(1, timeout=15)
        assert entries(received.body) == [("http://data.example.org/via-hub.txt", "created")]
    finally:
        subscriber.stop()
