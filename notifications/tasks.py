"""Celery tasks of the hub: take ids, call a service, safe to run twice.

Without a broker (eager mode) they run in the calling process; retries then
wait for the next sweep (`resend_due_deliveries`, also run after each publish).
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.db import transaction

from . import delivery, framework, hub, publisher

logger = logging.getLogger(__name__)


def run(task, *args: object) -> None:
    """Queue `task`, or run it here in eager mode (logging, never raising, a failure)."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        result = task.apply(args=args)
        if result.failed():
            logger.error("%s%r failed: %s", task.name, args, result.result)
        return
    task.delay(*args)


def run_after_commit(task, *args: object) -> None:
    transaction.on_commit(lambda: run(task, *args))


def send(delivery_ids: list[int] | None) -> None:
    """Send deliveries now; come back for the retries (with a broker) at their time."""
    retry_in = delivery.deliver(delivery_ids)
    if retry_in is not None and not settings.CELERY_TASK_ALWAYS_EAGER:
        deliver.apply_async(args=(delivery_ids,), countdown=retry_in)


@shared_task
def publish_changes(resource_set_id: int, after_change_id: int = 0) -> int:
    """Notify a set's new changes and send them (first attempt right here)."""
    delivery_ids = publisher.publish_changes(resource_set_id, after_change_id=after_change_id)
    if delivery_ids:
        send(delivery_ids)
    if settings.CELERY_TASK_ALWAYS_EAGER:
        delivery.deliver(None)  # no beat without a broker: retry what is due
    return len(delivery_ids)


@shared_task
def announce_documents(resource_set_ids: list[int] | None = None) -> int:
    """Framework notifications for the sets' documents (all sets and the Source
    Description with None)."""
    delivery_ids = framework.announce(resource_set_ids)
    if delivery_ids:
        send(delivery_ids)
    return len(delivery_ids)


@shared_task
def verify_subscription(request_id: int) -> bool:
    """Verify a subscriber's intent (WebSub §5.3)."""
    return hub.verify(request_id)


@shared_task
def deliver(delivery_ids: list[int] | None = None) -> None:
    """Send (again) the due deliveries among these ids."""
    send(delivery_ids)


@shared_task
def resend_due_deliveries() -> None:
    """Periodic: every due delivery, including those whose message was lost with Redis."""
    send(None)


@shared_task
def expire_subscriptions() -> int:
    """Periodic: end lapsed leases and forget old notifications."""
    from .housekeeping import forget_old_notifications

    forget_old_notifications()
    return hub.expire_leases()
