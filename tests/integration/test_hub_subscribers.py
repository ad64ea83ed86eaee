"""Subscribers the hub cannot trust: ones that trickle their answers, ones that lose access."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest

from notifications import callbacks, delivery
from notifications.models import Delivery, Subscription
from sources.models import ApiToken
from tests.support import accept_forever, created, make_set
from tests.websub_subscriber import Subscriber

from .test_notifications import SECRET, subscribe

TIMEOUT = {"CALLBACK_TIMEOUT": 1.0}


@pytest.fixture
def subscriber() -> Iterator[Subscriber]:
    running = Subscriber(secret=SECRET).start()
    yield running
    running.stop()


@pytest.fixture
def trickler() -> Iterator[str]:
    """A callback that answers 200 with a 100 kB body, one byte every 0.2 s."""

    def answer(sock: socket.socket) -> None:
        with sock:
            sock.recv(65536)
            try:
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                for _ in range(100000):
                    time.sleep(0.2)
                    sock.sendall(b"x")
            except OSError:
                return

    listener = accept_forever(answer)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/callback"
    listener.close()


def test_an_answer_that_trickles_is_cut_at_the_callback_timeout(settings, trickler) -> None:
    settings.RESOURCESYNC_NOTIFICATIONS = {**settings.RESOURCESYNC_NOTIFICATIONS, **TIMEOUT}
    outcome: list[object] = []

    def send() -> None:
        try:
            outcome.append(callbacks.send("POST", trickler, content=b"<urlset/>"))
        except httpx.HTTPError as error:
            outcome.append(error)

    sender = threading.Thread(target=send, daemon=True)
    started = time.monotonic()
    sender.start()
    sender.join(10)  # old code: 4096 bytes read at 5 bytes/s, 14 minutes

    assert not sender.is_alive()
    assert isinstance(outcome[0], httpx.ReadTimeout)
    assert time.monotonic() - started < 3


def test_a_claim_lasts_as_long_as_its_batch_can_take(
    client, django_capture_on_commit_callbacks, db, subscriber, settings
) -> None:
    """A claim that ended while its batch still ran let a sweep send the rows again."""
    settings.RESOURCESYNC_NOTIFICATIONS = {
        **settings.RESOURCESYNC_NOTIFICATIONS,
        "CALLBACK_TIMEOUT": 5.0,
        "DELIVERY_CONCURRENCY": 1,
    }
    notifying_set = make_set(publish_notifications=True)
    subscribe(client, django_capture_on_commit_callbacks, notifying_set, subscriber)
    subscriber.answers = [500]
    for n in range(8):
        created(notifying_set, 1, start=n)
    rows = list(Delivery.objects.all())
    now = max(row.next_attempt_at for row in rows) + timedelta(hours=1)

    claimed = delivery.claim(None, now)

    assert len(claimed) == 8
    # one at a time, each up to 5 s for a pooled connection, to connect, to shake hands, to answer
    assert all(row.claimed_until >= now + timedelta(seconds=8 * 20) for row in claimed)


def protected_subscription(client, capture, subscriber, *, user=None):
    """A protected set, and a subscriber to it with its provider's token (or `user`'s)."""
    resource_set = make_set(slug="private", protected=True, publish_notifications=True)
    owner = {"user": user} if user else {"provider": resource_set.provider}
    token, key = ApiToken.issue(**owner)
    response = subscribe(client, capture, resource_set, subscriber, token=key)
    assert response.status_code == 202
    created(resource_set, 1)
    assert len(subscriber.wait_for(1)) == 1
    return resource_set, token


def test_a_revoked_token_stops_a_protected_sets_deliveries(
    client, django_capture_on_commit_callbacks, db, subscriber
) -> None:
    resource_set, token = protected_subscription(
        client, django_capture_on_commit_callbacks, subscriber
    )
    token.revoked = True
    token.save()

    created(resource_set, 1, start=1)

    assert len(subscriber.received) == 1
    assert not Delivery.objects.filter(status=Delivery.Status.PENDING).exists()


def test_a_pending_delivery_is_cancelled_once_its_token_is_revoked(
    client, django_capture_on_commit_callbacks, db, subscriber
) -> None:
    resource_set, token = protected_subscription(
        client, django_capture_on_commit_callbacks, subscriber
    )
    subscriber.answers = [500]
    created(resource_set, 1, start=1)
    row = Delivery.objects.get(status=Delivery.Status.PENDING)
    token.revoked = True
    token.save()

    delivery.deliver(None, now=row.next_attempt_at + timedelta(minutes=1))

    row.refresh_from_db()
    assert row.status == Delivery.Status.CANCELLED
    assert subscriber.attempts == 2  # the first change, and the failed first try


def test_a_set_made_protected_stops_reaching_anonymous_subscribers(
    client, django_capture_on_commit_callbacks, db, subscriber
) -> None:
    notifying_set = make_set(publish_notifications=True)
    subscribe(client, django_capture_on_commit_callbacks, notifying_set, subscriber)
    created(notifying_set, 1)
    assert len(subscriber.wait_for(1)) == 1
    notifying_set.protected = True
    notifying_set.save()

    created(notifying_set, 1, start=1)

    assert len(subscriber.received) == 1
    assert Subscription.objects.get().token is None


def test_a_token_that_still_reaches_the_set_keeps_its_deliveries(
    client, django_capture_on_commit_callbacks, db, subscriber
) -> None:
    resource_set, token = protected_subscription(
        client, django_capture_on_commit_callbacks, subscriber
    )
    created(resource_set, 1, start=1)
    assert len(subscriber.wait_for(2)) == 2
    assert Subscription.objects.get().token == token


def test_a_deactivated_staff_users_token_stops_its_deliveries(
    client, django_capture_on_commit_callbacks, db, subscriber, django_user_model
) -> None:
    staff = django_user_model.objects.create_user("ops", is_staff=True)
    resource_set, _ = protected_subscription(
        client, django_capture_on_commit_callbacks, subscriber, user=staff
    )
    staff.is_active = False
    staff.save()

    created(resource_set, 1, start=1)

    assert len(subscriber.received) == 1


@pytest.mark.django_db(transaction=True)
def test_migrating_marks_protected_subscriptions_without_a_token_failing() -> None:
    """Otherwise they would be skipped from then on, with nothing saying why."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor
    from django.utils import timezone

    before, after = (
        [("notifications", "0001_initial")],
        [("notifications", "0002_subscription_token")],
    )
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    provider = old.get_model("sources", "DataProvider").objects.create(slug="p", name="P")
    sets = old.get_model("sources", "ResourceSet")
    subscriptions = old.get_model("notifications", "Subscription")
    for slug, protected in (("open", False), ("closed", True)):
        subscriptions.objects.create(
            resource_set=sets.objects.create(provider=provider, slug=slug, protected=protected),
            kind="change",
            callback=f"https://subscriber.example.org/{slug}",
            lease_seconds=3600,
            expires_at=timezone.now() + timedelta(hours=1),
        )

    MigrationExecutor(connection).migrate(after)

    states = dict(Subscription.objects.values_list("resource_set__slug", "state"))
    assert states == {"open": "active", "closed": "failing"}
    assert "subscribe again" in Subscription.objects.get(state="failing").last_error


def test_a_connection_is_never_shared_between_two_callbacks_on_one_address(
    monkeypatch, settings
) -> None:
    """Pinned in the URL, a connection (and the certificate it checked) went to the next host."""
    settings.RESOURCESYNC_NOTIFICATIONS = {
        **settings.RESOURCESYNC_NOTIFICATIONS,
        "ALLOWED_CALLBACK_NETWORKS": ["127.0.0.0/8"],
    }
    resolve = socket.getaddrinfo
    names = {"one.example": "127.0.0.1", "two.example": "127.0.0.1"}
    monkeypatch.setattr(
        socket, "getaddrinfo", lambda host, *a, **k: resolve(names.get(host, host), *a, **k)
    )
    hosts: list[list[str]] = []

    def talk(sock: socket.socket) -> None:
        seen: list[str] = []
        hosts.append(seen)
        with sock, sock.makefile("rb") as reader:
            while reader.readline():
                while (header := reader.readline()) not in (b"\r\n", b""):
                    if header.lower().startswith(b"host:"):
                        seen.append(header.split(b":")[1].strip().decode())
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    listener = accept_forever(talk)
    port = listener.getsockname()[1]
    try:
        for host in ("one.example", "two.example", "one.example"):
            assert callbacks.send("POST", f"http://{host}:{port}/cb").ok
    finally:
        listener.close()

    assert sorted(hosts) == [["one.example"] * 2, ["two.example"]]
