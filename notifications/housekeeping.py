"""Keeping the notification log from growing without end."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef
from django.utils import timezone

from .conf import notification_settings
from .models import Delivery, Notification


def forget_old_notifications(*, now: datetime | None = None) -> int:
    """Delete notifications older than KEEP_DAYS with nothing left to deliver.

    A topic's newest payload stays readable at its URL (it is kept on the topic).
    """
    now = now or timezone.now()
    cutoff = now - timedelta(days=notification_settings().KEEP_DAYS)
    pending = Delivery.objects.filter(notification=OuterRef("pk"), status=Delivery.Status.PENDING)
    old = Notification.objects.filter(created_at__lt=cutoff).exclude(Exists(pending))
    count, _ = old.delete()
    return count
