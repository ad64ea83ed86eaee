"""Publishing: turn new changes and document changes into notifications on a set's topics.

Each run holds its topic's row, so runs of one set follow each other: change
payloads stay consecutive and every change is notified once (an old-dated
change may make a payload overlap the previous one; see `payloads`).
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import Max, Min
from django.utils import timezone

from sitemaps import links
from sources.generators.database import DatabaseGenerator
from sources.models import Change, ResourceSet
from sources.services import resource_set_lock

from . import external
from .conf import notification_settings
from .delivery import queue_deliveries
from .models import Notification, Subscription, Topic, TopicKind
from .payloads import ChangePayload, change_payloads, notification_interval
from .topics import publishes_notifications


def locked_topic(resource_set: ResourceSet, kind: str, *, starting_after: int = 0) -> Topic:
    """The topic's row, locked until the transaction ends (created on first use)."""
    Topic.objects.get_or_create(
        resource_set=resource_set, kind=kind, defaults={"through_change_id": starting_after}
    )
    return Topic.objects.select_for_update().get(resource_set=resource_set, kind=kind)


def subscribers(resource_set: ResourceSet, kind: str, now: datetime) -> list[Subscription]:
    """Subscriptions that receive new notifications: active, with a lease still running,
    and for a protected set a token that still reaches it."""
    active = Subscription.objects.filter(
        resource_set=resource_set,
        kind=kind,
        state=Subscription.State.ACTIVE,
        expires_at__gt=now,
    ).select_related("resource_set", "token__user", "token__provider")
    return [subscription for subscription in active if subscription.may_receive()]


def publish(
    topic: Topic, payloads: list[tuple[bytes, int, datetime | None, datetime | None]], now: datetime
) -> tuple[list[Notification], list[int]]:
    """Store the payloads as notifications of `topic` and queue a delivery per subscriber."""
    notifications = [
        Notification.objects.create(
            resource_set=topic.resource_set,
            kind=topic.kind,
            payload=content,
            entries=entries,
            since=since,
            until=until,
        )
        for content, entries, since, until in payloads
    ]
    topic.last_payload = payloads[-1][0]
    topic.last_published_at = now
    if not notification_settings().embedded_hub:
        resource_set, kind = topic.resource_set, topic.kind
        transaction.on_commit(lambda: external.publish(resource_set, kind))
    delivery_ids = queue_deliveries(
        notifications, subscribers(topic.resource_set, topic.kind, now), now
    )
    return notifications, delivery_ids


def publish_changes(resource_set_id: int, *, after_change_id: int = 0) -> list[int]:
    """Notify the set's changes not notified yet; returns the deliveries to send.

    A topic starts with the changes after `after_change_id` (the first batch
    ingested once the set publishes notifications), never with its history.
    """
    resource_set = ResourceSet.objects.select_related("provider", "capability_settings").get(
        pk=resource_set_id
    )
    with transaction.atomic():
        # Taken first, as ingestion does: on SQLite a read before the first write
        # would make this transaction fail to write once another one committed.
        resource_set_lock(resource_set=resource_set)
        newest = (
            Change.objects.filter(resource_set=resource_set).aggregate(newest=Max("id"))["newest"]
            or 0
        )
        if not publishes_notifications(resource_set):
            # Nothing is owed for the time without notifications: subscribers see the gap.
            Topic.objects.filter(resource_set=resource_set, kind=TopicKind.CHANGE).update(
                through_change_id=newest, notified_until=None
            )
            return []
        topic = locked_topic(resource_set, TopicKind.CHANGE, starting_after=after_change_id)
        payloads = next_payloads(topic, newest)
        if not payloads:
            return []
        now = timezone.now()
        _, delivery_ids = publish(
            topic, [(p.content, p.entries, p.since, p.until) for p in payloads], now
        )
        topic.through_change_id = newest
        topic.notified_until = max(filter(None, [topic.notified_until, payloads[-1].until]))
        topic.save()
    return delivery_ids


def next_payloads(topic: Topic, newest: int) -> list[ChangePayload]:
    """The payloads for the changes after the topic's last one, through change `newest`."""
    resource_set = topic.resource_set
    new = Change.objects.filter(
        resource_set=resource_set, id__gt=topic.through_change_id, id__lte=newest
    )
    bounds = new.aggregate(earliest=Min("datetime"), latest=Max("datetime"))
    if bounds["earliest"] is None:
        return []
    since, until = notification_interval(topic.notified_until, bounds["earliest"], bounds["latest"])
    records = DatabaseGenerator().iter_changes(
        resource_set, since=since, until=until, through=newest
    )
    return change_payloads(
        records,
        since=since,
        until=until,
        capability_list_url=links.capability_list_url(resource_set),
    )
