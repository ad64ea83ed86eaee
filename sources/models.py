"""Providers, resource sets, and the two records of every event.

`Resource` is the current snapshot of a set, `Change` the append-only log.
The database rows are the durable record; Elasticsearch mirrors them.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models, transaction
from django.db.models import Q

from sitemaps.protocol.constants import MAX_ENTRIES_PER_DOCUMENT, ChangeType
from sitemaps.protocol.uris import base_url_problem

MAX_URI_LENGTH = 2048


class DataProvider(models.Model):
    """An organisation whose resources the portal publishes."""

    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=100, unique=True)
    contact = models.CharField(max_length=254, blank=True, help_text="E-mail or name to contact.")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Its sets' published documents and resource URIs name the slug."""
        if self.pk and self.resource_sets.exists():
            stored = DataProvider.objects.filter(pk=self.pk).values_list("slug", flat=True).first()
            if stored is not None and stored != self.slug:
                raise ValidationError({"slug": PROVIDER_MOVE_REFUSED})


#: Why a set's place in the URLs is fixed once it holds changes.
MOVE_REFUSED = (
    "This cannot change once the set holds changes: its documents and resource URIs name "
    "it, and destinations follow them. Create a new set instead."
)
PROVIDER_MOVE_REFUSED = (
    "This cannot change while the provider has sets: their documents and resource URIs "
    "name it. Delete its sets first (one that holds changes keeps it for good)."
)


def validate_url_prefix(value: str) -> None:
    """Every resource URI of the set starts with it, so it must start valid <loc>s."""
    problem = base_url_problem(value)
    if problem is not None:
        raise ValidationError(problem)


def validate_absolute_directory(value: str) -> None:
    """A relative root would be read from wherever each process happened to start."""
    if value and not os.path.isabs(value):
        raise ValidationError("Give an absolute directory, such as /srv/data/articles.")


class ResourceSet(models.Model):
    """A set of resources with its own Capability List."""

    provider = models.ForeignKey(
        DataProvider, on_delete=models.CASCADE, related_name="resource_sets"
    )
    slug = models.SlugField(max_length=100)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    url_prefix = models.URLField(
        max_length=1000,
        validators=[validate_url_prefix],
        help_text="Prefix joined to abs_path and rel_path locations.",
    )
    resource_root_dir = models.CharField(
        max_length=1000,
        blank=True,
        validators=[validate_absolute_directory],
        help_text="Absolute directory that abs_path locations must lie inside.",
    )
    protected = models.BooleanField(
        default=False, help_text="Documents need a token of this provider (or staff)."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    changed_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="When the set last accepted events."
    )
    accepts_changes_since = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="Start of the open Change List: earlier event datetimes would fall "
        "into a closed, immutable list and are refused.",
    )

    class Meta:
        ordering = ["provider__slug", "slug"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "slug"], name="unique_set_slug_per_provider"
            )
        ]

    def __str__(self) -> str:
        return f"{self.provider.slug}/{self.slug}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """One transaction: a changed url_prefix moves the stored URIs in its post_save
        (sitemaps.receivers), and ingestion must never see the new prefix without them."""
        with transaction.atomic():
            super().save(*args, **kwargs)

    def clean(self) -> None:
        """Once the set holds changes, its documents and resource URIs name its provider and
        slug for good; before, a mistyped one may be mended (sitemaps.receivers rewrites
        the empty documents)."""
        if not self.pk or not Change.objects.filter(resource_set_id=self.pk).exists():
            return
        stored = ResourceSet.objects.filter(pk=self.pk).values("provider_id", "slug").first()
        if stored is None:
            return
        if stored["slug"] != self.slug:
            raise ValidationError({"slug": MOVE_REFUSED})
        if stored["provider_id"] != self.provider_id:
            raise ValidationError({"provider": MOVE_REFUSED})

    @property
    def path(self) -> str:
        """The `<provider>/<set>` part of every URL of this set."""
        return f"{self.provider.slug}/{self.slug}"

    @property
    def capabilities(self) -> CapabilitySettings:
        """The set's capability settings; defaults when none were saved."""
        try:
            return self.capability_settings
        except CapabilitySettings.DoesNotExist:
            return CapabilitySettings(resource_set=self)


#: A Change List rotation period the admin takes: shorter, the open list closed at every
#: run (and beat ran one every 30 s); longer, past what every database's interval holds.
ROTATION_BOUNDS = (timedelta(minutes=1), timedelta(days=3650))


def validate_rotation(value: timedelta) -> None:
    shortest, longest = ROTATION_BOUNDS
    if value < shortest:
        raise ValidationError("The rotation period must be at least 1 minute.")
    if value > longest:
        raise ValidationError("The rotation period must be at most 3650 days.")


class CapabilitySettings(models.Model):
    """What a set publishes and how its documents are paged and refreshed."""

    resource_set = models.OneToOneField(
        ResourceSet, on_delete=models.CASCADE, related_name="capability_settings"
    )
    publish_resource_list = models.BooleanField(default=True)
    publish_change_list = models.BooleanField(default=True)
    publish_resource_dump = models.BooleanField(default=False)
    publish_change_dump = models.BooleanField(default=False)
    publish_notifications = models.BooleanField(default=False)
    entries_per_document = models.PositiveIntegerField(
        default=MAX_ENTRIES_PER_DOCUMENT,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_ENTRIES_PER_DOCUMENT)],
    )
    changelist_rotation = models.DurationField(
        default=timedelta(days=1),
        validators=[validate_rotation],
        help_text="The open Change List closes after this period.",
    )
    changelist_keep = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Keep this many closed Change Lists in the Change List Index; older ones "
        "move to the Change List Archive. Empty: keep all.",
    )
    regenerate_after_changes = models.PositiveIntegerField(
        default=1000,
        help_text="With a Celery worker: regenerate at once when this many changes are "
        "pending. Without one (eager Celery) every ingest regenerates at once.",
    )
    regenerate_after_seconds = models.PositiveIntegerField(
        default=1,
        validators=[MaxValueValidator(3650 * 24 * 3600)],
        help_text="With a Celery worker: fewer pending changes wait until this many seconds "
        "after the last run started (a lone change after a quiet spell runs at once).",
    )

    class Meta:
        verbose_name = "capability settings"
        verbose_name_plural = "capability settings"
        constraints = [
            models.CheckConstraint(
                condition=Q(entries_per_document__gte=1)
                & Q(entries_per_document__lte=MAX_ENTRIES_PER_DOCUMENT),
                name="entries_per_document_in_range",
            )
        ]

    def __str__(self) -> str:
        return f"Capabilities of {self.resource_set}"


class LocationType(models.TextChoices):
    URL = "url", "URL"
    ABS_PATH = "abs_path", "Absolute path"
    REL_PATH = "rel_path", "Relative path"


class Resource(models.Model):
    """The current state of one resource; its id is the stable paging key."""

    resource_set = models.ForeignKey(
        ResourceSet, on_delete=models.CASCADE, related_name="resources"
    )
    location_type = models.CharField(max_length=10, choices=LocationType.choices)
    location_value = models.TextField()
    uri = models.CharField(
        max_length=MAX_URI_LENGTH, help_text="The resolved URL: the entry's loc in the documents."
    )
    length = models.BigIntegerField()
    md5 = models.CharField(max_length=32)
    sha256 = models.CharField(max_length=64, blank=True)
    mime = models.CharField(max_length=255)
    lastmod = models.DateTimeField()
    ln = models.JSONField(default=list, blank=True)
    timestamp = models.DateTimeField(help_text="When the portal last wrote this row.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["resource_set", "uri"], name="unique_resource_uri")
        ]

    def __str__(self) -> str:
        return self.uri


class Change(models.Model):
    """One accepted event; rows are only ever appended."""

    resource_set = models.ForeignKey(ResourceSet, on_delete=models.CASCADE, related_name="changes")
    resource_key = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Id of the resource row the change touched (kept after a delete); "
        "empty for a delete of an unknown resource.",
    )
    change = models.CharField(max_length=10, choices=ChangeType.choices())
    location_type = models.CharField(max_length=10, choices=LocationType.choices)
    location_value = models.TextField()
    uri = models.CharField(max_length=MAX_URI_LENGTH)
    length = models.BigIntegerField(null=True, blank=True)
    md5 = models.CharField(max_length=32, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    mime = models.CharField(max_length=255, blank=True)
    lastmod = models.DateTimeField(null=True, blank=True)
    ln = models.JSONField(default=list, blank=True)
    datetime = models.DateTimeField(help_text="When the change happened.")
    timestamp = models.DateTimeField(help_text="When the portal received it.")
    event_id = models.CharField(max_length=200, blank=True, help_text="The client's event id.")
    indexed = models.BooleanField(
        default=False, help_text="Mirrored into Elasticsearch (resource and change)."
    )

    class Meta:
        indexes = [
            models.Index(fields=["resource_set", "datetime", "id"], name="change_window"),
            models.Index(
                fields=["indexed", "id"], name="change_unindexed", condition=Q(indexed=False)
            ),
            # The dashboard counts changes by day of receipt from this index alone.
            models.Index(fields=["timestamp", "resource_set", "change"], name="change_received"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["resource_set", "event_id"],
                condition=~Q(event_id=""),
                name="unique_event_id_per_set",
            )
        ]

    def __str__(self) -> str:
        return f"{self.change} {self.uri} at {self.datetime:%Y-%m-%dT%H:%M:%SZ}"


def hash_token(key: str) -> str:
    """Tokens are stored as SHA-256 digests: a leaked table grants nothing."""
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    """A random URL-safe key that no command line mistakes for an option (no leading '-')."""
    while (key := secrets.token_urlsafe(32)).startswith("-"):
        pass
    return key


class ApiToken(models.Model):
    """A bearer token of one provider (or a staff user, reaching every set)."""

    name = models.CharField(max_length=100, blank=True)
    provider = models.ForeignKey(
        DataProvider, on_delete=models.CASCADE, null=True, blank=True, related_name="tokens"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        help_text="A staff user's token reaches every set.",
    )
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(
        max_length=8, editable=False, help_text="First characters, to tell tokens apart."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(provider__isnull=False) | Q(user__isnull=False),
                name="token_has_owner",
                violation_error_message="A token belongs to a provider or to a staff user.",
            )
        ]

    def __str__(self) -> str:
        owner = self.provider.slug if self.provider else f"staff:{self.user}"
        return f"{self.prefix}… ({owner})"

    def clean(self) -> None:
        """No owner is the constraint's message; a new owner that is a non-staff user alone
        would reach nothing. (A token whose user left the staff can still be revoked.)"""
        stored = (
            ApiToken.objects.filter(pk=self.pk).values("provider_id", "user_id").first()
            if self.pk
            else None
        )
        owner_changed = stored != {"provider_id": self.provider_id, "user_id": self.user_id}
        if not owner_changed:
            return
        if self.provider_id is None and self.user is not None and not self.user.is_staff:
            raise ValidationError(
                {
                    "user": "Only a staff user's token reaches sets without a provider: "
                    "choose the provider, or a staff user."
                }
            )

    @classmethod
    def issue(
        cls, *, provider: DataProvider | None = None, user=None, name: str = ""
    ) -> tuple[ApiToken, str]:
        """Create a token; the plain key is returned once and never stored."""
        key = new_key()
        token = cls.objects.create(
            provider=provider, user=user, name=name, key_hash=hash_token(key), prefix=key[:8]
        )
        return token, key

    @property
    def is_staff(self) -> bool:
        return self.user is not None and self.user.is_staff

    @property
    def in_force(self) -> bool:
        """Not revoked, and its user and provider still active."""
        return self.out_of_force_because() is None

    def out_of_force_because(self) -> str | None:
        """Why the token no longer counts (for its 401), or None while it does."""
        if self.revoked:
            return "Invalid or revoked token."
        if self.user is not None and not self.user.is_active:
            return "The token's user is inactive."
        if self.provider is not None and not self.provider.active:
            return "The token's provider is inactive."
        return None

    def can_reach(self, resource_set: ResourceSet) -> bool:
        """Provider tokens reach their own sets; staff tokens reach all; none once out of force.

        Checked again for what a token was kept for (a hub subscription), not only per request.
        """
        if not self.in_force:
            return False
        return self.is_staff or self.provider_id == resource_set.provider_id


class MirrorCopy(models.Model):
    """Which Elasticsearch indices the `indexed` marks of the changes refer to.

    An index can be deleted and created again (by Elasticsearch itself, for
    the next write) while the database still calls every change indexed; its
    identity (each index's UUID) tells the copy that was filled from the one
    that only holds what came after.
    """

    names = models.CharField(max_length=600, unique=True)
    identity = models.TextField()

    def __str__(self) -> str:
        return self.names
