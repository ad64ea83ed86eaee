"""Change and framework notifications through the embedded WebSub hub.

A subscriber written from the specs (tests/websub_subscriber.py) subscribes
through the hub its Capability List names, answers the challenge and receives
what the portal publishes; every payload is checked against the official XSDs.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta
from itertools import pairwise
from urllib.parse import urlsplit

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from lxml import etree

from notifications import delivery, hub, tasks
from notifications.models import (
    Delivery,
    Notification,
    Subscription,
    SubscriptionRequest,
    TopicKind,
)
from notifications.payloads import ONE_MICROSECOND
from sources.models import ApiToken, Change, ResourceSet
from sources.services import ingest_events
from sources.signals import events_ingested, receivers_muted
from tests.support import NS, assert_valid, created, event, ingest, make_set, store_documents_in
from tests.websub_subscriber import Subscriber, discover, subscribe_form

SECRET = "a shared secret"


@pytest.fixture
def notifying_set(db) -> ResourceSet:
    return make_set(publish_notifications=True)


@pytest.fixture
def subscriber():
    running = Subscriber(secret=SECRET).start()
    yield running
    running.stop()


def auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def capability_list(client: Client, resource_set: ResourceSet, token: str | None = None):
    url = reverse(
        "sitemaps:capability-list",
        kwargs={"provider": resource_set.provider.slug, "set_slug": resource_set.slug},
    )
    return client.get(url, headers=auth(token))


def subscribe(
    client: Client,
    capture,
    resource_set: ResourceSet,
    subscriber: Subscriber,
    *,
    capability: str = "change-notification",
    mode: str = "subscribe",
    token: str | None = None,
    **form: object,
):
    """Discover the hub and topic in the Capability List and ask the hub; the hub verifies
    (after the commit) before this returns."""
    topic, hub_url = discover(capability_list(client, resource_set, token).content, capability)
    subscriber.intend(mode, topic)
    data = subscribe_form(mode, topic, subscriber.url, secret=subscriber.secret, **form)
    with capture(execute=True):
        response = client.post(urlsplit(hub_url).path, data, headers=auth(token))
    return response


def post_events(client: Client, resource_set: ResourceSet, events: list[dict], key: str):
    url = reverse("api:events", args=(resource_set.provider.slug, resource_set.slug))
    return client.post(
        url, data=json.dumps(events), content_type="application/json", headers=auth(key)
    )


def api_event(name: str, change: str = "created", **fields: object) -> dict:
    data = {
        "change": change,
        "location": {"type": "url", "value": f"http://data.example.org/{name}"},
        "length": 3,
        "md5": "900150983cd24fb0d6963f7d28e17f72",
        "mime": "text/plain",
        "lastmod": "2026-01-02T03:04:05Z",
    }
    data.update(fields)
    return data


def change_notifications():
    return Notification.objects.filter(kind=TopicKind.CHANGE)


def entries(payload: bytes) -> list[tuple[str, str]]:
    root = etree.fromstring(payload)
    return [
        (url.findtext("sm:loc", namespaces=NS), url.find("rs:md", NS).get("change"))
        for url in root.findall("sm:url", NS)
    ]


def root_md(payload: bytes) -> dict[str, str]:
    return dict(etree.fromstring(payload).find("rs:md", NS).attrib)


# --- Publisher: topics in the Capability List, topic URLs ---


def test_capability_list_advertises_both_topics_as_the_spec_example_shows(client, notifying_set):
    content = capability_list(client, notifying_set).content
    assert_valid(content)
    base = "http://127.0.0.1:8000/resourcesync/acme/articles"
    hub_url = "http://127.0.0.1:8000/resourcesync/hub"
    for kind in ("change", "framework"):
        expected = (
            f'<url><loc>{base}/notifications/{kind}</loc><rs:md capability="{kind}-notification"/>'
            f'<rs:ln rel="hub" href="{hub_url}"/></url>'
        )
        assert expected.encode() in content


def test_a_set_without_notifications_advertises_no_topic(client, db):
    quiet = make_set(publish_notifications=False)
    assert b"notification" not in capability_list(client, quiet).content
    topic = f"/resourcesync/acme/{quiet.slug}/notifications/change"
    assert client.get(topic).status_code == 404


def test_topic_answers_get_and_head_with_self_and_hub_links(client, notifying_set):
    """Before its first payload a topic has no content: 204, not an empty body typed
    application/xml, which is not well-formed XML."""
    topic = "/resourcesync/acme/articles/notifications/change"
    for method in (client.get, client.head):
        response = method(topic)
        assert response.status_code == 204
        assert "Content-Type" not in response
        assert response.content == b""
        assert response["Link"] == (
            "<http://127.0.0.1:8000/resourcesync/acme/articles/notifications/change>; "
            'rel="self", <http://127.0.0.1:8000/resourcesync/hub>; rel="hub"'
        )
    created(notifying_set, 2)
    response = client.get(topic)
    assert (response.status_code, response["Content-Type"]) == (200, "application/xml")
    body = response.content
    assert body == bytes(change_notifications().get().payload)
    assert client.head(topic)["Content-Length"] == str(len(body))


# --- Subscribe, verify, receive ---


def test_subscriber_receives_a_signed_change_notification_for_a_posted_event(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber
):
    key = ApiToken.issue(provider=notifying_set.provider)[1]
    response = subscribe(
        client, django_capture_on_commit_callbacks, notifying_set, subscriber, lease_seconds=3600
    )

    assert response.status_code == 202
    check = subscriber.verifications[-1]
    topic = "http://127.0.0.1:8000/resourcesync/acme/articles/notifications/change"
    assert check["hub.mode"] == "subscribe"
    assert check["hub.topic"] == topic
    assert check["hub.lease_seconds"] == "3600"
    assert len(check["hub.challenge"]) >= 32
    subscription = Subscription.objects.get()
    assert (subscription.kind, subscription.secret) == (TopicKind.CHANGE, SECRET)

    with django_capture_on_commit_callbacks(execute=True):
        answer = post_events(client, notifying_set, [api_event("a.txt")], key)
    assert answer.status_code == 200, answer.content

    (received,) = subscriber.wait_for(1)
    assert received.signature_valid is True
    assert received.headers["X-Hub-Signature"].startswith("sha256=")
    assert received.headers["Content-Type"] == "application/xml"
    assert f'<{topic}>; rel="self"' in received.headers["Link"]
    assert '<http://127.0.0.1:8000/resourcesync/hub>; rel="hub"' in received.headers["Link"]
    assert_valid(received.body)
    md = root_md(received.body)
    assert md["capability"] == "change-notification"
    assert md["from"] <= md["until"]
    assert entries(received.body) == [("http://data.example.org/a.txt", "created")]
    assert Delivery.objects.get().status == Delivery.Status.DELIVERED


def test_a_subscriber_with_another_secret_finds_the_signature_bad(
    client, django_capture_on_commit_callbacks, notifying_set
):
    honest = Subscriber(secret=SECRET).start()
    try:
        subscribe(client, django_capture_on_commit_callbacks, notifying_set, honest)
        honest.secret = "not the secret it gave the hub"
        created(notifying_set, 1)
        assert honest.received and honest.received[0].signature_valid is False
        assert honest.accepted == []  # a subscriber drops what it cannot authenticate
        tampered = honest.received[0].body.replace(b"created", b"deleted")
        honest.secret = SECRET
        assert honest.signature_ok(tampered, honest.received[0].headers["X-Hub-Signature"]) is False
        assert honest.signature_ok(
            honest.received[0].body, honest.received[0].headers["X-Hub-Signature"]
        )
    finally:
        honest.stop()


def test_without_a_secret_deliveries_are_unsigned(
    client, django_capture_on_commit_callbacks, notifying_set
):
    plain = Subscriber().start()
    try:
        subscribe(client, django_capture_on_commit_callbacks, notifying_set, plain)
        created(notifying_set, 1)
        (received,) = plain.wait_for(1)
        assert "X-Hub-Signature" not in received.headers
    finally:
        plain.stop()


def test_a_callback_with_a_query_keeps_it_when_verified_and_when_delivered(
    client, django_capture_on_commit_callbacks, notifying_set
):
    """WebSub §5.1.1: a callback may carry a query. The hub appends its own parameters
    to it when it verifies, and posts notifications to the callback as given."""
    queried = Subscriber(secret=SECRET).start(path="/callback?foo=bar&red=fish")
    try:
        response = subscribe(client, django_capture_on_commit_callbacks, notifying_set, queried)
        assert response.status_code == 202
        ((method, path),) = queried.requests
        assert method == "GET" and path.startswith("/callback?foo=bar&red=fish&hub.")
        assert queried.verifications[-1]["hub.mode"] == "subscribe"
        assert Subscription.objects.get().callback == queried.url

        created(notifying_set, 1)
        queried.wait_for(1)
        assert queried.requests[1:] == [("POST", "/callback?foo=bar&red=fish")]
    finally:
        queried.stop()


def test_an_unconfirmed_intent_subscribes_nobody(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber
):
    subscriber.verify = False  # answers the challenge with 404, as for an intent it never had
    response = subscribe(client, django_capture_on_commit_callbacks, notifying_set, subscriber)
    assert response.status_code == 202  # the request was fine; the intent was not confirmed
    assert subscriber.verifications
    assert not Subscription.objects.exists()


def test_framework_topic_is_its_own_subscription(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber
):
    subscribe(
        client,
        django_capture_on_commit_callbacks,
        notifying_set,
        subscriber,
        capability="framework-notification",
    )
    assert Subscription.objects.get().kind == TopicKind.FRAMEWORK


# --- Leases and unsubscribing ---


@pytest.mark.parametrize(("asked", "granted"), [(10, 300), (10**9, 31 * 24 * 3600), (None, 864000)])
def test_leases_are_kept_within_300_seconds_and_31_days(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber, asked, granted
):
    form = {} if asked is None else {"lease_seconds": asked}
    subscribe(client, django_capture_on_commit_callbacks, notifying_set, subscriber, **form)
    assert subscriber.verifications[-1]["hub.lease_seconds"] == str(granted)
    subscription = Subscription.objects.get()
    assert subscription.lease_seconds == granted
    lease = subscription.expires_at - subscription.renewed_at
    assert lease == timedelta(seconds=granted)


def test_an_expired_lease_receives_nothing_and_is_removed(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber
):
    subscribe(
        client, django_capture_on_commit_callbacks, notifying_set, subscriber, lease_seconds=300
    )
    Subscription.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    created(notifying_set, 1)

    assert subscriber.received == []
    assert not Delivery.objects.exists()
    assert hub.expire_leases() == 1
    assert not Subscription.objects.exists()


def test_renewing_extends_the_lease(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber
):
    subscribe(
        client, django_capture_on_commit_callbacks, notifying_set, subscriber, lease_seconds=300
    )
    first = Subscription.objects.get().expires_at
    subscribe(
        client, django_capture_on_commit_callbacks, notifying_set, subscriber, lease_seconds=600
    )
    renewed = Subscription.objects.get()
    assert renewed.expires_at > first
    assert renewed.lease_seconds == 600


def test_a_lease_running_out_between_publishing_and_sending_cancels_the_delivery(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber
):
    subscribe(client, django_capture_on_commit_callbacks, notifying_set, subscriber)
    subscriber.answers = [500]
    created(notifying_set, 1)
    later = timezone.now() + timedelta(days=30)
    delivery.deliver(None, now=later)
    assert Delivery.objects.get().status == Delivery.Status.CANCELLED


def test_unsubscribing_is_verified_and_stops_deliveries(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber
):
    subscribe(client, django_capture_on_commit_callbacks, notifying_set, subscriber)
    response = subscribe(
        client, django_capture_on_commit_callbacks, notifying_set, subscriber, mode="unsubscribe"
    )
    assert response.status_code == 202
    assert subscriber.verifications[-1]["hub.mode"] == "unsubscribe"
    assert "hub.lease_seconds" not in subscriber.verifications[-1]
    assert not Subscription.objects.exists()
    created(notifying_set, 1)
    assert subscriber.received == []


def test_an_unsubscribe_the_subscriber_did_not_ask_for_changes_nothing(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber
):
    subscribe(client, django_capture_on_commit_callbacks, notifying_set, subscriber)
    topic, hub_url = discover(capability_list(client, notifying_set).content)
    with django_capture_on_commit_callbacks(execute=True):
        client.post(urlsplit(hub_url).path, subscribe_form("unsubscribe", topic, subscriber.url))
    assert Subscription.objects.exists()  # the callback did not confirm (a third party asked)


# --- Delivery: retries, timeouts, durability ---


def test_a_500_is_retried_with_backoff_until_a_2xx(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber
):
    subscribe(client, django_capture_on_commit_callbacks, notifying_set, subscriber)
    subscriber.answers = [500, 503, 200]

    created(notifying_set, 1)

    row = Delivery.objects.get()
    assert (row.status, row.attempts, row.last_status) == ("pending", 1, 500)
    first_wait = (row.next_attempt_at - timezone.now()).total_seconds()
    assert 3 < first_wait <= 6
    assert delivery.deliver(None) is None  # not due yet: nothing sent
    assert subscriber.attempts == 1

    delivery.deliver(None, now=row.next_attempt_at)
    row.refresh_from_db()
    assert (row.attempts, row.last_status) == (2, 503)
    assert Subscription.objects.get().failures == 2

    delivery.deliver(None, now=row.next_attempt_at)
    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_status) == ("delivered", 3, 200)
    (received,) = subscriber.wait_for(1)
    assert received.signature_valid
    assert Subscription.objects.get().failures == 0


def test_backoff_doubles_and_keeps_trying_for_more_than_a_day(settings):
    delays = [delivery.backoff(attempt) for attempt in range(1, 40)]
    assert 4.5 <= delays[0] <= 5.5
    assert 9 <= delays[1] <= 11
    assert max(delays) <= 3600 * 1.1
    assert sum(delays) > 24 * 3600


def test_a_callback_that_never_answers_times_out_and_is_given_up_after_the_retry_period(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber, settings
):
    settings.RESOURCESYNC_NOTIFICATIONS = {
        **settings.RESOURCESYNC_NOTIFICATIONS,
        "CALLBACK_TIMEOUT": 0.5,
    }
    subscribe(client, django_capture_on_commit_callbacks, notifying_set, subscriber)
    subscriber.hang = 3

    created(notifying_set, 1)

    row = Delivery.objects.get()
    assert row.status == "pending"
    assert "Timeout" in row.last_error
    assert row.last_status is None

    delivery.deliver(None, now=row.created_at + timedelta(hours=26, seconds=1))
    row.refresh_from_db()
    assert row.status == Delivery.Status.FAILED
    subscription = Subscription.objects.get()
    assert subscription.state == Subscription.State.FAILING
    created(notifying_set, 1, start=1)
    assert Delivery.objects.count() == 1  # a failing subscription gets nothing new


def test_pending_deliveries_survive_a_lost_message_and_the_sweep_sends_them(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber
):
    from notifications import tasks

    subscribe(client, django_capture_on_commit_callbacks, notifying_set, subscriber)
    subscriber.answers = [500, 200]
    created(notifying_set, 1)
    # As if Redis lost the retry's message and its worker died holding the row.
    Delivery.objects.update(
        next_attempt_at=timezone.now(), claim="dead", claimed_until=timezone.now()
    )

    tasks.resend_due_deliveries.apply()

    assert Delivery.objects.get().status == Delivery.Status.DELIVERED
    assert len(subscriber.wait_for(1)) == 1


def test_a_claimed_delivery_is_not_sent_twice(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber
):
    subscribe(client, django_capture_on_commit_callbacks, notifying_set, subscriber)
    subscriber.answers = [500, 200]
    created(notifying_set, 1)
    row = Delivery.objects.get()
    when = row.next_attempt_at
    assert delivery.claim(None, when)  # a sender took it
    delivery.deliver(None, now=when)  # another sender finds nothing to do
    assert subscriber.attempts == 1


def test_callbacks_are_rate_limited_without_failing(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber, settings
):
    settings.RESOURCESYNC_NOTIFICATIONS = {
        **settings.RESOURCESYNC_NOTIFICATIONS,
        "CALLBACK_REQUESTS_PER_MINUTE": 1,
    }
    subscribe(client, django_capture_on_commit_callbacks, notifying_set, subscriber)
    created(notifying_set, 1)
    created(notifying_set, 1, start=1)
    assert len(subscriber.received) == 1
    waiting = Delivery.objects.get(status="pending")
    assert waiting.attempts == 0  # postponed, not failed
    assert Subscription.objects.get().failures == 0


# --- Protected sets and refusals ---


def test_a_protected_topic_needs_the_providers_token_and_is_never_revealed(
    client, django_capture_on_commit_callbacks, db, subscriber
):
    secret_set = make_set(slug="private", protected=True, publish_notifications=True)
    provider_key = ApiToken.issue(provider=secret_set.provider)[1]
    other = make_set(provider="other", slug="open", publish_notifications=True)
    other_key = ApiToken.issue(provider=other.provider)[1]
    topic = "http://127.0.0.1:8000/resourcesync/acme/private/notifications/change"
    unknown = "http://127.0.0.1:8000/resourcesync/acme/nothing/notifications/change"
    subscriber.intend("subscribe", topic)

    def ask(topic_url: str, key: str | None):
        form = subscribe_form("subscribe", topic_url, subscriber.url, secret=SECRET)
        with django_capture_on_commit_callbacks(execute=True):
            return client.post("/resourcesync/hub", form, headers=auth(key))

    refused = [ask(topic, None), ask(topic, other_key), ask(unknown, None)]
    assert {response.status_code for response in refused} == {400}
    assert len({response.content for response in refused}) == 1  # nothing tells them apart
    assert b"hub.topic" in refused[0].content
    assert not subscriber.verifications
    assert client.get(urlsplit(topic).path).status_code == 401

    assert ask(topic, provider_key).status_code == 202
    assert Subscription.objects.get().resource_set == secret_set
    ingest(secret_set, [event("created", "secret.txt")])
    assert len(subscriber.wait_for(1)) == 1


UNREACHABLE = (
    b"hub.callback: the callback's host is not reachable from this hub"
    b" (not resolvable, or not a public address)\n"
)


@pytest.mark.parametrize(
    "callback",
    [
        "http://10.1.2.3/cb",
        "http://169.254.169.254/latest/meta-data",
        "http://192.168.0.10:8080/cb",
        "http://[::1]:9/cb",
        "http://[::ffff:10.0.0.1]/cb",
        "http://0.0.0.0/cb",
        "http://nothing.invalid/cb",
    ],
)
def test_callbacks_into_private_networks_are_refused_alike(client, notifying_set, callback):
    """One answer whether the host has no address or a private one: no DNS oracle."""
    response = ask_hub(client, {"hub.callback": callback})
    assert response.status_code == 400
    assert response.content == UNREACHABLE


@pytest.mark.parametrize(
    ("callback", "reason"),
    [
        ("ftp://example.org/cb", b"must be an http or https URL"),
        ("http://user:pw@127.0.0.1/cb", b"may not carry credentials"),
        ("http://@127.0.0.1/cb", b"may not carry credentials"),
        ("javascript:alert(1)", b"must be an http or https URL"),
        ("http:///cb", b"has no host"),
        ("http://127.0.0.1:0/cb", b"may not name port 0"),
        ("http://127.0.0.1:65536/cb", b"is not a valid URL"),
        ("http://[::1/cb", b"is not a valid URL"),
    ],
)
def test_callbacks_the_hub_would_not_call_are_refused(client, notifying_set, callback, reason):
    response = ask_hub(client, {"hub.callback": callback})
    assert response.status_code == 400
    assert response.content == b"hub.callback: " + reason + b"\n"


def test_loopback_is_refused_unless_a_setting_allows_it(client, notifying_set, settings):
    settings.RESOURCESYNC_NOTIFICATIONS = {
        **settings.RESOURCESYNC_NOTIFICATIONS,
        "ALLOWED_CALLBACK_NETWORKS": [],
    }
    for callback in ("http://127.0.0.1:9/cb", "http://localhost:9/cb"):
        assert ask_hub(client, {"hub.callback": callback}).content == UNREACHABLE


@pytest.fixture
def lookups(monkeypatch) -> list[str]:
    """The hosts the hub resolves."""
    import socket

    looked_up: list[str] = []
    resolve = socket.getaddrinfo

    def counted(host, *args, **kwargs):
        looked_up.append(host)
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", counted)
    return looked_up


def test_the_topic_is_checked_before_the_callbacks_host_is_resolved(client, notifying_set, lookups):
    response = ask_hub(client, {"hub.topic": "junk", "hub.callback": "http://runsc:5432/"})
    assert response.content == b"hub.topic: is not a topic of this hub\n"
    assert lookups == []


def test_the_rate_limit_is_checked_before_the_callbacks_host_is_resolved(
    client, notifying_set, settings, lookups
):
    settings.RESOURCESYNC_NOTIFICATIONS = {
        **settings.RESOURCESYNC_NOTIFICATIONS,
        "HUB_REQUESTS_PER_MINUTE": 1,
    }
    answers = [ask_hub(client, {"hub.callback": "http://nothing.invalid/"}) for _ in range(3)]
    assert [answer.status_code for answer in answers] == [400, 429, 429]
    assert lookups == ["nothing.invalid"]


def test_the_callback_is_checked_again_at_delivery(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber, settings
):
    subscribe(client, django_capture_on_commit_callbacks, notifying_set, subscriber)
    settings.RESOURCESYNC_NOTIFICATIONS = {
        **settings.RESOURCESYNC_NOTIFICATIONS,
        "ALLOWED_CALLBACK_NETWORKS": [],
    }
    created(notifying_set, 1)
    assert subscriber.attempts == 0
    row = Delivery.objects.get()
    assert row.status == "pending"
    assert row.last_error.startswith("refused:")


def test_only_the_first_bytes_of_an_answer_are_read(notifying_set, settings):
    """A challenge echo followed by a flood is cut at MAX_RESPONSE_BYTES (and fails)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from notifications import callbacks

    class Flood(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            for _ in range(1000):  # 64 MB if it were all read
                self.wfile.write(b"x" * 65536)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Flood)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        answer = callbacks.send("GET", f"http://127.0.0.1:{server.server_port}/")
    finally:
        server.shutdown()
        server.server_close()
    assert answer.status == 200
    assert len(answer.body) == 4096


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"hub.mode": "publish"}, "hub.mode"),
        ({"hub.mode": "subscribe"}, "hub.callback"),
        ({"hub.mode": "subscribe", "hub.callback": "http://127.0.0.1:9/"}, "hub.topic"),
        (
            {"hub.lease_seconds": "soon"},
            "hub.lease_seconds",
        ),
        ({"hub.secret": "s" * 200}, "hub.secret"),
    ],
)
def test_bad_hub_requests_get_a_4xx_naming_the_field(client, notifying_set, form, field):
    full = {
        "hub.mode": "subscribe",
        "hub.callback": "http://127.0.0.1:9/cb",
        "hub.topic": "http://127.0.0.1:8000/resourcesync/acme/articles/notifications/change",
    }
    if "hub.topic" not in form and "hub.callback" not in form and form.get("hub.mode") is None:
        full.update(form)
    else:
        full = form
    response = client.post("/resourcesync/hub", full)
    assert response.status_code == 400
    assert response.content.startswith(field.encode())


def test_a_hub_request_with_too_many_fields_gets_a_400_saying_so(client, notifying_set):
    """Django's own 400 page named nothing; the hub answers in its own words."""
    response = ask_hub(client, {f"x{n}": "1" for n in range(1500)})

    assert response.status_code == 400
    assert response.content.startswith(b"request: too many form fields")


def test_a_hub_request_in_a_charset_it_cannot_read_gets_a_400_saying_so(client, notifying_set):
    """Django raised BadRequest reading the form: a 500 under DEBUG, a 400 naming nothing."""
    response = client.generic(
        "POST",
        "/resourcesync/hub",
        b"hub.mode=subscribe",
        content_type="application/x-www-form-urlencoded; charset=utf-16",
    )

    assert response.status_code == 400
    assert response.content.startswith(b"request: ")
    assert b"charset" in response.content


BOUNDARY = "b0undary"


def multipart(*headers: str) -> bytes:
    parts = "".join(f"--{BOUNDARY}\r\n{header}\r\n\r\nx\r\n" for header in headers)
    return f"{parts}--{BOUNDARY}--\r\n".encode()


@pytest.mark.parametrize(
    "body",
    [
        multipart(f'Content-Disposition: form-data; name="hub.mode"; x="{"a" * 2000}"'),
        multipart(
            *[f'Content-Disposition: form-data; name="f"; filename="{n}"' for n in range(101)]
        ),
    ],
    ids=["overlong-part-header", "too-many-files"],
)
def test_a_multipart_hub_request_django_cannot_parse_gets_a_clear_400(
    client, notifying_set, caplog, body
):
    """Django's parser refused it (MultiPartParserError, TooManyFilesSent) and logged the
    traceback of a request the client got wrong: the hub answers in its own words, and
    logs none."""

    with caplog.at_level(logging.DEBUG):
        response = client.generic(
            "POST",
            "/resourcesync/hub",
            body,
            content_type=f"multipart/form-data; boundary={BOUNDARY}",
        )

    assert response.status_code == 400
    assert response.content.startswith(b"request: ")
    assert b"multipart" in response.content
    assert not [record for record in caplog.records if record.exc_info], caplog.text
    assert "Traceback" not in caplog.text


def test_the_hub_takes_only_post(client, db):
    assert client.get("/resourcesync/hub").status_code == 405


TOPIC = "http://127.0.0.1:8000/resourcesync/acme/articles/notifications/change"


def ask_hub(client: Client, fields: dict[str, str]):
    """A subscribe request for a loopback callback, with `fields` changed."""
    form = {"hub.mode": "subscribe", "hub.callback": "http://127.0.0.1:9/cb", "hub.topic": TOPIC}
    return client.post("/resourcesync/hub", {**form, **fields})


@pytest.mark.parametrize(
    "lease",
    ["\u00b2", "\u0661\u0662\u0663\u0660\u0660", "3e5", "-300", "1" * 5000 + "x"],
    ids=["superscript-two", "arabic-indic", "exponent", "negative", "long-then-letter"],
)
def test_a_lease_is_ascii_digits_or_a_400_naming_it(client, notifying_set, lease):
    response = ask_hub(client, {"hub.lease_seconds": lease})
    assert response.status_code == 400
    assert response.content.startswith(b"hub.lease_seconds:")


@pytest.mark.parametrize(
    ("lease", "granted"),
    [("9" * 5000, 31 * 24 * 3600), ("0" * 5000 + "600", 600), ("000", 300)],
    ids=["5000-nines", "leading-zeros", "zero"],
)
def test_a_lease_of_thousands_of_digits_is_brought_within_bounds(
    client, notifying_set, lease, granted
):
    assert ask_hub(client, {"hub.lease_seconds": lease}).status_code == 202
    assert SubscriptionRequest.objects.get().lease_seconds == granted


@pytest.mark.parametrize(
    "fields",
    [
        {"hub.secret": "a\x00b"},
        {"hub.secret": "a\x1bb"},
        {"hub.callback": "http://127.0.0.1:9/cb\x00x"},
        {"hub.topic": TOPIC + "\x00"},
        {"hub.mode": "subscribe\x00"},
        {"hub.lease_seconds": "600\x00"},
    ],
    ids=["secret-nul", "secret-escape", "callback-nul", "topic-nul", "mode-nul", "lease-nul"],
)
def test_control_characters_in_a_hub_field_get_a_400_naming_it(client, notifying_set, fields):
    """PostgreSQL cannot store NUL: it was a 500 there (SQLite stored it)."""
    response = ask_hub(client, fields)
    assert response.status_code == 400
    (field,) = fields
    assert response.content.startswith(f"{field}: may not contain control characters".encode())
    assert not SubscriptionRequest.objects.exists()


def test_a_secret_may_hold_spaces_and_any_printable_character(client, notifying_set):
    assert ask_hub(client, {"hub.secret": " ein Geheimnis \u00fc "}).status_code == 202
    assert SubscriptionRequest.objects.get().secret == " ein Geheimnis \u00fc "


FULL_WIDTH_LOCALHOST = "\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54"


@pytest.mark.parametrize(
    "callback",
    [
        f"http://{FULL_WIDTH_LOCALHOST}:9/echo",
        "http://127.0.0.1:9/caf\u00e9",
        "http://127.0.0.1:9/a b",
        "http://127.0.0.1:9/a%zz",
        "http://127.0.0.1:9\\@example.org/",
        "http://127.0.0.1:9/<x>",
    ],
    ids=["full-width-host", "non-ascii-path", "space", "bad-escape", "backslash", "angle"],
)
def test_a_callback_must_be_a_plain_ascii_uri(client, notifying_set, callback):
    """An IRI comes percent-encoded, its host punycoded: what is stored is what is sent."""
    response = ask_hub(client, {"hub.callback": callback})
    assert response.status_code == 400
    assert response.content.startswith(b"hub.callback: must be a URI")
    assert not SubscriptionRequest.objects.exists()


def test_a_percent_encoded_callback_is_taken(client, notifying_set):
    callback = "http://127.0.0.1:9/caf%C3%A9?a=1&b=%2F;c=d~e"
    assert ask_hub(client, {"hub.callback": callback}).status_code == 202
    assert SubscriptionRequest.objects.get().callback == callback


def pending(resource_set: ResourceSet, callback: str, mode: str = "subscribe"):
    return SubscriptionRequest.objects.create(
        mode=mode,
        resource_set=resource_set,
        kind=TopicKind.CHANGE,
        callback=callback,
        lease_seconds=300,
    )


def test_a_callback_the_hub_cannot_call_leaves_no_request_behind(notifying_set, subscriber):
    """Requests stored before callbacks were checked as URIs: verification fails, cleanly."""
    port = urlsplit(subscriber.url).port
    for callback in (
        f"http://{FULL_WIDTH_LOCALHOST}:{port}/callback",  # Host header: UnicodeEncodeError
        f"http://127.0.0.1:{port}/callback\x01x",  # httpx.InvalidURL
    ):
        assert hub.verify(pending(notifying_set, callback).pk) is False
    assert not SubscriptionRequest.objects.exists()
    assert not Subscription.objects.exists()


def test_an_unexpected_error_while_verifying_still_removes_the_request(notifying_set, monkeypatch):
    def broken(request):
        raise RuntimeError("a bug")

    monkeypatch.setattr(hub, "challenge_answered", broken)
    with pytest.raises(RuntimeError):
        hub.verify(pending(notifying_set, "http://127.0.0.1:9/cb").pk)
    assert not SubscriptionRequest.objects.exists()


def test_a_callback_host_and_address_have_a_budget_that_variants_of_one_url_share(
    client, notifying_set, settings
):
    settings.RESOURCESYNC_NOTIFICATIONS = {
        **settings.RESOURCESYNC_NOTIFICATIONS,
        "HUB_REQUESTS_PER_MINUTE": 2,
    }
    variants = [f"http://127.0.0.1:9/cb?{n}" for n in range(10)]
    variants += [f"http://127.0.0.1:9/CB#{n}" for n in range(10)]
    variants += ["http://127.0.0.1:9/Cb", "http://127.0.0.1:8/cb"]
    answers = [ask_hub(client, {"hub.callback": url}) for url in variants]
    # 2 a minute per callback, and ten times that per host.
    assert [a.status_code for a in answers] == [202] * 20 + [429] * 2
    assert answers[-1].content.startswith(b"hub.callback: too many requests")
    assert ask_hub(client, {"hub.callback": "http://127.0.0.2:9/cb"}).status_code == 202
    # Another name of a spent address (wildcard DNS gives any number): the same budget.
    other_name = ask_hub(client, {"hub.callback": "http://localhost:9/cb"})
    assert other_name.status_code == 429
    assert other_name.content == b"hub.callback: too many requests for this callback's address\n"
    # Nor does another spelling of the address (IPv4-mapped IPv6, as an AAAA record gives).
    mapped = ask_hub(client, {"hub.callback": "http://[::ffff:127.0.0.1]:9/cb"})
    assert mapped.status_code == 429


def test_an_unsubscribe_with_nothing_to_end_calls_no_callback(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber
):
    """WebSub lets the hub ignore it: a 202 as for any unsubscribe, and no GET to the callback."""
    subscriber.intend("unsubscribe", TOPIC)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/resourcesync/hub", subscribe_form("unsubscribe", TOPIC, subscriber.url)
        )
    assert response.status_code == 202
    assert response.content == b"Accepted: the hub will verify the intent to unsubscribe.\n"
    assert subscriber.verifications == []
    assert not SubscriptionRequest.objects.exists()


@pytest.mark.parametrize("unsubscribe_first", [True, False])
def test_an_unsubscribe_after_a_subscribe_still_being_verified_ends_it(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber, unsubscribe_first
):
    subscriber.intend("subscribe", TOPIC)
    subscriber.intend("unsubscribe", TOPIC)
    with django_capture_on_commit_callbacks() as verifications:
        for mode in ("subscribe", "unsubscribe"):
            form = subscribe_form(mode, TOPIC, subscriber.url)
            assert client.post("/resourcesync/hub", form).status_code == 202
    for verification in reversed(verifications) if unsubscribe_first else verifications:
        verification()
    assert not Subscription.objects.exists()
    assert not SubscriptionRequest.objects.exists()


def test_an_unsubscribe_verified_while_the_subscribe_is_being_verified_wins(
    notifying_set, subscriber, monkeypatch
):
    subscribe_request = pending(notifying_set, subscriber.url)
    unsubscribe_request = pending(notifying_set, subscriber.url, mode="unsubscribe")

    def unsubscribed_meanwhile(request):
        if request.pk == subscribe_request.pk:
            assert hub.verify(unsubscribe_request.pk) is True
        return True

    monkeypatch.setattr(hub, "challenge_answered", unsubscribed_meanwhile)
    assert hub.verify(subscribe_request.pk) is False
    assert not Subscription.objects.exists()
    assert not SubscriptionRequest.objects.exists()


# --- What change notifications contain ---


def test_consecutive_change_notifications_cover_consecutive_intervals(client, notifying_set):
    created(notifying_set, 3)
    ingest(notifying_set, [event("updated", "r/0000001", version=2)])
    ingest(notifying_set, [event("deleted", "r/0000002")])

    payloads = [bytes(n.payload) for n in change_notifications().order_by("id")]
    assert len(payloads) == 3
    for payload in payloads:
        assert_valid(payload)
    intervals = [(n.since, n.until) for n in change_notifications().order_by("id")]
    for (_, until), (since, _) in pairwise(intervals):
        assert since == until + ONE_MICROSECOND
    assert [entries(p) for p in payloads] == [
        [(f"http://data.example.org/r/000000{n}", "created") for n in range(3)],
        [("http://data.example.org/r/0000001", "updated")],
        [("http://data.example.org/r/0000002", "deleted")],
    ]


def test_notification_entries_are_change_list_entries(client, notifying_set):
    """Exactly what the open Change List says about the same changes, entry for entry."""
    created(notifying_set, 2)
    payload = bytes(change_notifications().get().payload)
    response = client.get("/resourcesync/acme/articles/changelist-1.xml")
    change_list = b"".join(response.streaming_content)
    as_list = etree.fromstring(change_list).findall("sm:url", NS)
    in_payload = etree.fromstring(payload).findall("sm:url", NS)
    assert [etree.tostring(e) for e in in_payload] == [etree.tostring(e) for e in as_list]


def test_an_old_dated_change_is_notified_in_an_overlapping_payload(notifying_set):
    """Ingestion now dates such a change at its receipt; older versions kept it as sent."""
    created(notifying_set, 2)
    first = change_notifications().get()
    early = first.since  # before the first payload's `until`: a client sent an old datetime
    before = Change.objects.latest("id").pk
    with receivers_muted(events_ingested):
        ingest_events(resource_set=notifying_set, events=[event("updated", "r/0000000", version=2)])
    Change.objects.filter(pk__gt=before).update(datetime=early)
    tasks.publish_changes(notifying_set.pk, before)
    second = change_notifications().order_by("-id").first()
    assert (second.since, second.until) == (early, early)  # overlaps the first payload
    assert_valid(bytes(second.payload))
    assert ("http://data.example.org/r/0000000", "updated") in entries(bytes(second.payload))


def test_a_set_publishing_no_notifications_sends_none(db):
    quiet = make_set(slug="quiet")
    created(quiet, 2)
    assert not Notification.objects.exists()


# --- Framework notifications ---


def test_framework_notifications_announce_lists_created_and_updated(
    client, django_capture_on_commit_callbacks, db, subscriber
):
    resource_set = make_set(publish_notifications=True, entries_per_document=2)
    subscribe(
        client,
        django_capture_on_commit_callbacks,
        resource_set,
        subscriber,
        capability="framework-notification",
    )
    created(resource_set, 1)
    created(resource_set, 2, start=1)  # three resources: two Resource Lists under an index

    announced = []
    for received in subscriber.wait_for(2):
        root = assert_valid(received.body)
        assert root.find("rs:md", NS).get("capability") == "framework-notification"
        for url in root.findall("sm:url", NS):
            md = url.find("rs:md", NS)
            index = url.find("rs:ln[@rel='index']", NS)
            assert md.get("datetime")
            announced.append(
                (
                    url.findtext("sm:loc", namespaces=NS).rsplit("/", 1)[1],
                    md.get("capability"),
                    md.get("change"),
                    None if index is None else index.get("href").rsplit("/", 1)[1],
                )
            )
    assert set(announced[:3]) == {
        ("capabilitylist.xml", "capabilitylist", "created", None),
        ("resourcelist.xml", "resourcelist", "created", None),  # the set's one list
        ("changelist.xml", "changelist", "created", None),
    }
    # Three resources, two a page: two Resource Lists under an index, two Change Lists too.
    later = set(announced[3:])
    for kind in ("resourcelist", "changelist"):
        for number in (1, 2):
            assert (f"{kind}-{number}.xml", kind, "created", f"{kind}.xml") in later
        # The URL now holds an index, never announced (spec 10), nor deleted: the
        # notification spec lets a list be created or updated only.
        assert not any(item[0] == f"{kind}.xml" for item in later)


def test_framework_notifications_use_only_the_changes_the_spec_allows(db, tmp_path):
    """A Resource Dump was announced `updated` at every run, and lists that became indexes
    `deleted`: the notification spec allows a Resource Dump `created` only, and `deleted`
    for Capability Lists and Source Descriptions only."""
    from .test_re_resolve import FileSet

    allowed = {
        "resourcelist": {"created", "updated"},
        "resourcedump": {"created"},
        "changelist": {"created", "updated"},
        "changedump": {"created", "updated"},
        "capabilitylist": {"created", "updated", "deleted"},
        "description": {"created", "updated", "deleted"},
    }
    files = FileSet(
        tmp_path / "files",
        publish_notifications=True,
        entries_per_document=2,
        publish_resource_dump=True,
    )
    for start in (0, 1, 3):
        events = [files.write(f"f{n}.txt") for n in range(start * 10, start * 11 + 1)]
        ingest(files.resource_set, events)

    seen = [
        (md.get("capability"), md.get("change"))
        for row in Notification.objects.filter(kind=TopicKind.FRAMEWORK)
        for md in etree.fromstring(bytes(row.payload)).iterfind("sm:url/rs:md", NS)
    ]
    assert ("resourcedump", "created") in seen
    assert all(change in allowed[capability] for capability, change in seen), seen


def test_a_capability_list_change_is_announced_up_to_the_source_description(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber
):
    from notifications import framework

    created(notifying_set, 1)  # its lists are written
    framework.announce(None)  # the state as it is
    subscribe(
        client,
        django_capture_on_commit_callbacks,
        notifying_set,
        subscriber,
        capability="framework-notification",
    )
    settings_row = notifying_set.capability_settings
    settings_row.publish_resource_list = False
    with django_capture_on_commit_callbacks(execute=True):
        settings_row.save()

    ups = {}
    # The Capability List only: a Resource List may not be announced deleted (the
    # notification spec's table), and the Capability List no longer names it.
    for received in subscriber.wait_for(1):
        root = assert_valid(received.body)
        up = root.find("rs:ln[@rel='up']", NS).get("href").rsplit("/", 1)[1]
        ups[up] = [
            (
                url.findtext("sm:loc", namespaces=NS).rsplit("/", 1)[1],
                url.find("rs:md", NS).get("change"),
            )
            for url in root.findall("sm:url", NS)
        ]
    assert ups == {"resourcesync": [("capabilitylist.xml", "updated")]}


def test_a_new_set_changes_the_source_description_on_every_framework_channel(
    client, django_capture_on_commit_callbacks, notifying_set, subscriber
):
    from notifications import framework

    framework.announce(None)
    subscribe(
        client,
        django_capture_on_commit_callbacks,
        notifying_set,
        subscriber,
        capability="framework-notification",
    )
    with django_capture_on_commit_callbacks(execute=True):
        make_set(slug="another")
    (received,) = subscriber.wait_for(1)
    locs = [
        u.findtext("sm:loc", namespaces=NS)
        for u in etree.fromstring(received.body).findall("sm:url", NS)
    ]
    assert locs == ["http://127.0.0.1:8000/.well-known/resourcesync"]


# --- Admin ---


def test_admin_lists_subscriptions_and_deliveries_and_retries_or_removes(
    admin_client, django_capture_on_commit_callbacks, notifying_set, subscriber
):
    subscribe(admin_client, django_capture_on_commit_callbacks, notifying_set, subscriber)
    subscriber.answers = [500]
    created(notifying_set, 1)
    Subscription.objects.update(state=Subscription.State.FAILING)
    Delivery.objects.update(status=Delivery.Status.FAILED)

    page = admin_client.get("/admin/notifications/subscription/")
    assert page.status_code == 200
    assert subscriber.url.encode() in page.content
    assert admin_client.get("/admin/notifications/delivery/").status_code == 200
    assert admin_client.get("/admin/notifications/notification/").status_code == 200

    subscriber.answers = [200]
    subscription = Subscription.objects.get()
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(
            "/admin/notifications/subscription/",
            {"action": "retry", "_selected_action": [subscription.pk]},
        )
    assert Subscription.objects.get().state == Subscription.State.ACTIVE
    assert Delivery.objects.get().status == Delivery.Status.DELIVERED

    admin_client.post(
        "/admin/notifications/subscription/",
        {"action": "remove", "_selected_action": [subscription.pk]},
    )
    assert not Subscription.objects.exists()
    assert Delivery.objects.exists()  # the log stays


def test_the_notification_and_delivery_logs_are_read_only_in_the_admin(admin_client, notifying_set):
    """Every field is read-only: Save reported success and changed nothing."""
    notification = Notification.objects.create(
        resource_set=notifying_set, kind="change", payload=b"<urlset/>"
    )
    delivery = Delivery.objects.create(
        notification=notification, callback="https://example.org/cb", next_attempt_at=timezone.now()
    )
    for row in (notification, delivery):
        url = reverse(f"admin:notifications_{row._meta.model_name}_change", args=[row.pk])
        page = admin_client.get(url).content.decode()
        assert 'name="_save"' not in page and 'name="_continue"' not in page
        assert admin_client.post(url, {}).status_code == 403
        delete = reverse(f"admin:notifications_{row._meta.model_name}_delete", args=[row.pk])
        assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    index = admin_client.get(reverse("admin:app_list", args=["notifications"])).content.decode()
    for model in ("notification", "delivery"):
        assert f'href="/admin/notifications/{model}/" class="viewlink"' in index
    assert Delivery.objects.filter(pk=delivery.pk).exists()


# --- With a real Celery worker ---


def test_a_celery_worker_verifies_publishes_and_delivers(celery_worker, client, subscriber):
    resource_set = make_set(publish_notifications=True)
    key = ApiToken.issue(provider=resource_set.provider)[1]
    topic, hub_url = discover(capability_list(client, resource_set).content)
    subscriber.intend("subscribe", topic)
    form = subscribe_form("subscribe", topic, subscriber.url, secret=SECRET)
    assert client.post(urlsplit(hub_url).path, form).status_code == 202
    deadline = timezone.now() + timedelta(seconds=30)
    while not Subscription.objects.exists():
        assert timezone.now() < deadline, celery_worker.log()[-3000:]
        time.sleep(0.1)
    subscriber.answers = [500, 200]  # the retry comes back from the worker by itself

    assert post_events(client, resource_set, [api_event("w.txt")], key).status_code == 200

    (received,) = subscriber.wait_for(1, timeout=30)
    assert received.signature_valid
    assert entries(received.body) == [("http://data.example.org/w.txt", "created")]
    assert subscriber.attempts == 2


def test_dumps_are_announced_too(db, tmp_path, settings):
    from .test_dumps import FileSet

    store_documents_in(settings, tmp_path / "documents")
    files = FileSet(tmp_path / "files", publish_notifications=True)
    files.post([files.write("a.txt", b"a"), files.write("b.txt", b"b")])  # regenerates

    announced = set()
    for notification in Notification.objects.filter(kind=TopicKind.FRAMEWORK):
        root = assert_valid(bytes(notification.payload))
        for url in root.findall("sm:url", NS):
            md = url.find("rs:md", NS)
            loc = url.findtext("sm:loc", namespaces=NS).rsplit("/", 1)[1]
            announced.add((loc, md.get("capability"), md.get("change")))
    assert ("resourcedump.xml", "resourcedump", "created") in announced
    assert ("changedump.xml", "changedump", "created") in announced
