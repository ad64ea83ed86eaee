"""Content distribution: POST each notification to its subscribers until they take it.

Rows first: a delivery is claimed in the database (so two senders never send
the same row at once), sent, and its outcome recorded; only a 2xx counts. A
failure is retried with exponential backoff for RETRY_SECONDS, then the
delivery is given up and its subscription marked failing. The HTTP requests of
a batch run in threads; every database access stays in the calling thread.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import random
import secrets
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from django.db.models import F, Q
from django.utils import timezone

from . import callbacks
from .conf import notification_settings
from .models import Delivery, Notification, Subscription
from .topics import link_header, topic_url

#: Seconds a rate-limited delivery waits before its next turn (not counted as a failure).
RATE_LIMIT_PAUSE = 2.0
#: Rows claimed by one batch at most.
BATCH_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt gave: an HTTP status, or the error that prevented one."""

    status: int | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def signature(secret: str, body: bytes) -> str:
    """`X-Hub-Signature` (WebSub §7.1): the body's HMAC keyed with the subscriber's secret."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def backoff(attempts: int) -> float:
    """Seconds before the next attempt: doubling from the base, capped, with 10% jitter."""
    config = notification_settings()
    delay = min(config.BACKOFF_BASE_SECONDS * 2 ** max(attempts - 1, 0), config.BACKOFF_MAX_SECONDS)
    return delay * random.uniform(0.9, 1.1)


def queue_deliveries(
    notifications: Iterable[Notification], subscriptions: list[Subscription], now: datetime
) -> list[int]:
    """One pending row per notification and subscriber; returns their ids."""
    rows = [
        Delivery(
            notification=notification,
            subscription=subscription,
            callback=subscription.callback,
            next_attempt_at=now,
        )
        for notification in notifications
        for subscription in subscriptions
    ]
    return [row.pk for row in Delivery.objects.bulk_create(rows)]


def due(now: datetime):
    """Pending rows whose turn has come and that no live sender holds."""
    return Delivery.objects.filter(
        Q(claimed_until__isnull=True) | Q(claimed_until__lt=now),
        status=Delivery.Status.PENDING,
        next_attempt_at__lte=now,
    )


def claim(ids: list[int] | None, now: datetime) -> list[Delivery]:
    """Take the due rows among `ids` (or any due rows) for this sender, in one UPDATE."""
    token = secrets.token_hex(16)
    rows = due(now)
    if ids is not None:
        rows = rows.filter(pk__in=ids)
    chosen = list(rows.order_by("next_attempt_at").values_list("pk", flat=True)[:BATCH_LIMIT])
    if not chosen:
        return []
    hold = now + timedelta(seconds=batch_seconds(len(chosen)))
    due(now).filter(pk__in=chosen).update(claim=token, claimed_until=hold)
    return list(
        Delivery.objects.filter(pk__in=chosen, claim=token, status=Delivery.Status.PENDING)
        .select_related(
            "notification__resource_set__provider",
            "subscription__resource_set",
            "subscription__token__user",
            "subscription__token__provider",
        )
        .order_by("pk")
    )


def batch_seconds(rows: int) -> float:
    """The longest a batch of `rows` can take, and a minute more: no claim ends before it.

    Each request waits at most CALLBACK_TIMEOUT for a pooled connection, as
    long to connect, as long for the TLS handshake and as long for the answer
    (callbacks.AnswerDeadline); DELIVERY_CONCURRENCY are sent at once. The
    minute covers the resolver, whose own timeouts bound it.
    """
    config = notification_settings()
    rounds = math.ceil(rows / config.DELIVERY_CONCURRENCY)
    return rounds * 4 * config.CALLBACK_TIMEOUT + 60


def request_headers(delivery: Delivery) -> dict[str, str]:
    notification = delivery.notification
    topic = topic_url(notification.resource_set, notification.kind)
    headers = {"Content-Type": "application/xml", "Link": link_header(topic)}
    subscription = delivery.subscription
    if subscription is not None and subscription.secret:
        headers["X-Hub-Signature"] = signature(subscription.secret, bytes(notification.payload))
    return headers


def post(delivery: Delivery, headers: dict[str, str]) -> Outcome:
    """POST the payload (no database here: this runs in a thread)."""
    try:
        response = callbacks.send(
            "POST", delivery.callback, content=bytes(delivery.notification.payload), headers=headers
        )
    except callbacks.CallbackRefused as error:
        return Outcome(error=f"refused: {error}")
    except httpx.HTTPError as error:
        return Outcome(
            error=f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        )
    return Outcome(status=response.status)


def deliver(ids: list[int] | None = None, *, now: datetime | None = None) -> float | None:
    """Send the due deliveries among `ids` (all due ones with None).

    Returns the seconds until the earliest retry this batch scheduled, if any.
    """
    now = now or timezone.now()
    rows = claim(ids, now)
    sendable: list[Delivery] = []
    for row in rows:
        if not still_wanted(row, now):
            finish(row, Delivery.Status.CANCELLED)
        elif callbacks.over_budget(
            "callback", row.callback, notification_settings().CALLBACK_REQUESTS_PER_MINUTE
        ):
            postpone(row, now, RATE_LIMIT_PAUSE)
        else:
            sendable.append(row)
    outcomes = send_all(sendable)
    delays = [record(row, outcome, now) for row, outcome in zip(sendable, outcomes, strict=True)]
    retries = [delay for delay in delays if delay is not None]
    if len(sendable) < len(rows):
        retries.append(RATE_LIMIT_PAUSE)
    return min(retries) if retries else None


def send_all(rows: list[Delivery]) -> list[Outcome]:
    if not rows:
        return []
    headers = [request_headers(row) for row in rows]
    workers = min(len(rows), notification_settings().DELIVERY_CONCURRENCY)
    if workers == 1:
        return [post(rows[0], headers[0])]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="websub") as pool:
        return list(pool.map(post, rows, headers))


def still_wanted(row: Delivery, now: datetime) -> bool:
    """Its subscription is there, its lease running, and it may still see the set."""
    subscription = row.subscription
    return subscription is not None and subscription.expires_at > now and subscription.may_receive()


def finish(row: Delivery, status: str, **fields: object) -> None:
    Delivery.objects.filter(pk=row.pk).update(status=status, claim="", claimed_until=None, **fields)


def postpone(row: Delivery, now: datetime, seconds: float) -> None:
    Delivery.objects.filter(pk=row.pk).update(
        next_attempt_at=now + timedelta(seconds=seconds), claim="", claimed_until=None
    )


def record(row: Delivery, outcome: Outcome, now: datetime) -> float | None:
    """Store the attempt; the seconds until the next one, or None when there is none."""
    attempts = row.attempts + 1
    facts = {"attempts": attempts, "last_status": outcome.status, "last_error": outcome.error}
    subscriptions = Subscription.objects.filter(deliveries=row)
    if outcome.ok:
        finish(row, Delivery.Status.DELIVERED, delivered_at=now, **facts)
        subscriptions.update(last_delivery_at=now, failures=0, last_error="")
        return None
    error = outcome.error or f"HTTP {outcome.status}"
    facts["last_error"] = error
    subscriptions.update(failures=F("failures") + 1, last_error=error)
    if now - row.created_at >= timedelta(seconds=notification_settings().RETRY_SECONDS):
        finish(row, Delivery.Status.FAILED, **facts)
        subscriptions.update(state=Subscription.State.FAILING)
        return None
    delay = backoff(attempts)
    Delivery.objects.filter(pk=row.pk).update(
        next_attempt_at=now + timedelta(seconds=delay), claim="", claimed_until=None, **facts
    )
    return delay
