"""Topics, subscriptions and the durable delivery log of the WebSub hub.

A delivery is a row before it is a Celery message: a message lost with Redis
or a killed worker leaves its row pending, and the periodic sweep sends it.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from sources.models import ApiToken, ResourceSet


class TopicKind(models.TextChoices):
    """Each set has two channels: the spec forbids mixing the two kinds on one topic."""

    CHANGE = "change", "change notifications"
    FRAMEWORK = "framework", "framework notifications"


class Topic(models.Model):
    """One channel of a set: its last payload, and how far change notifications reached."""

    resource_set = models.ForeignKey(
        ResourceSet, on_delete=models.CASCADE, related_name="notification_topics"
    )
    kind = models.CharField(max_length=10, choices=TopicKind.choices)
    last_payload = models.BinaryField(blank=True, default=b"")
    last_published_at = models.DateTimeField(null=True, blank=True)
    through_change_id = models.BigIntegerField(
        default=0, help_text="Change topic: every change up to this id has been notified."
    )
    notified_until = models.DateTimeField(
        null=True, blank=True, help_text="Change topic: `until` of the newest payload."
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["resource_set", "kind"], name="unique_topic_per_set")
        ]

    def __str__(self) -> str:
        return f"{self.resource_set} {self.kind} notifications"


class Subscription(models.Model):
    """A verified WebSub subscription of one callback to one topic, until its lease ends."""

    class State(models.TextChoices):
        ACTIVE = "active"
        FAILING = "failing", "failing (deliveries given up)"

    resource_set = models.ForeignKey(
        ResourceSet, on_delete=models.CASCADE, related_name="subscriptions"
    )
    kind = models.CharField(max_length=10, choices=TopicKind.choices)
    callback = models.URLField(max_length=2000)
    secret = models.CharField(max_length=200, blank=True, help_text="Signs deliveries (HMAC).")
    lease_seconds = models.PositiveIntegerField()
    expires_at = models.DateTimeField(db_index=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.ACTIVE)
    created_at = models.DateTimeField(auto_now_add=True)
    renewed_at = models.DateTimeField(null=True, blank=True)
    last_delivery_at = models.DateTimeField(null=True, blank=True)
    failures = models.PositiveIntegerField(default=0, help_text="Failed attempts in a row.")
    last_error = models.TextField(blank=True)
    token = models.ForeignKey(
        ApiToken,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The token it was asked with: a protected set's deliveries need it to reach "
        "the set still.",
    )

    class Meta:
        ordering = ["resource_set", "kind", "callback"]
        constraints = [
            models.UniqueConstraint(
                fields=["resource_set", "kind", "callback"], name="unique_subscription"
            )
        ]

    def __str__(self) -> str:
        return f"{self.callback} ({self.resource_set} {self.kind})"

    def may_receive(self) -> bool:
        """Whether its set is public, or its token still reaches it (`ApiToken.can_reach`)."""
        if not self.resource_set.protected:
            return True
        return self.token is not None and self.token.can_reach(self.resource_set)


class SubscriptionRequest(models.Model):
    """A subscribe or unsubscribe request waiting for the hub to verify the subscriber's intent."""

    class Mode(models.TextChoices):
        SUBSCRIBE = "subscribe"
        UNSUBSCRIBE = "unsubscribe"

    mode = models.CharField(max_length=12, choices=Mode.choices)
    resource_set = models.ForeignKey(ResourceSet, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=10, choices=TopicKind.choices)
    callback = models.URLField(max_length=2000)
    secret = models.CharField(max_length=200, blank=True)
    lease_seconds = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    token = models.ForeignKey(
        ApiToken, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    def __str__(self) -> str:
        return f"{self.mode} {self.callback}"


class Notification(models.Model):
    """One payload published on a topic (a change payload covers [since, until])."""

    resource_set = models.ForeignKey(
        ResourceSet, on_delete=models.CASCADE, related_name="notifications"
    )
    kind = models.CharField(max_length=10, choices=TopicKind.choices)
    payload = models.BinaryField()
    entries = models.PositiveIntegerField(default=0)
    since = models.DateTimeField(null=True, blank=True)
    until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.resource_set} {self.kind} notification {self.pk}"


class Delivery(models.Model):
    """Sending one notification to one subscriber, retried with backoff until it succeeds."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed", "failed (given up)"
        CANCELLED = "cancelled", "cancelled (lease ended or unsubscribed)"

    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="deliveries"
    )
    subscription = models.ForeignKey(
        Subscription, on_delete=models.SET_NULL, null=True, blank=True, related_name="deliveries"
    )
    callback = models.URLField(max_length=2000, help_text="Kept when the subscription goes.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    next_attempt_at = models.DateTimeField()
    claim = models.CharField(max_length=32, blank=True, help_text="The sender holding the row.")
    claimed_until = models.DateTimeField(
        null=True, blank=True, help_text="...until then; afterwards another sender may take it."
    )
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_status = models.PositiveIntegerField(null=True, blank=True, help_text="HTTP status.")
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "deliveries"
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                name="delivery_due",
                condition=Q(status="pending"),
            )
        ]

    def __str__(self) -> str:
        return f"notification {self.notification_id} to {self.callback}: {self.status}"


class AnnouncedDocument(models.Model):
    """A document as framework notifications last announced it (its ETag), to tell
    created from updated and to notice deletions. No set: the Source Description."""

    resource_set = models.ForeignKey(
        ResourceSet, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    loc = models.CharField(max_length=2000)
    capability = models.CharField(max_length=40)
    etag = models.CharField(max_length=64)
    index_url = models.CharField(max_length=2000, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["resource_set", "loc"], name="unique_announced_doc")
        ]

    def __str__(self) -> str:
        return self.loc
