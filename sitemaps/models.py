"""Where each published document lives and what it covers.

Resource List pages own stable key ranges `(after_key, through_key]` so an
update rewrites only the page holding that key and additions only touch the
tail. Change Lists own time windows `[since, until]`; a closed one is final.
"""

from __future__ import annotations

from django.db import models

from sources.models import ResourceSet

from .protocol.constants import Capability


class StoredDocument(models.Model):
    """A generated document in the `resourcesync` storage, served as is."""

    resource_set = models.ForeignKey(ResourceSet, on_delete=models.CASCADE)
    number = models.PositiveIntegerField(help_text="Part of the public file name.")
    storage_name = models.CharField(max_length=500, blank=True)
    etag = models.CharField(max_length=64, blank=True)
    entries = models.PositiveIntegerField(default=0)
    size = models.PositiveBigIntegerField(default=0)
    generated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    #: The capability it belongs to: Capability.RESOURCE_LIST or CHANGE_LIST.
    kind: str

    @property
    def public_name(self) -> str:
        """The file name in its URL."""
        return f"{self.kind}-{self.number}.xml"


class ResourceListPage(StoredDocument):
    resource_set = models.ForeignKey(
        ResourceSet, on_delete=models.CASCADE, related_name="resource_list_pages"
    )
    after_key = models.BigIntegerField(help_text="Keys above this belong here...")
    through_key = models.BigIntegerField(
        null=True, blank=True, help_text="...up to this one; empty on the open tail page."
    )
    at = models.DateTimeField(null=True, blank=True)
    completed = models.DateTimeField(null=True, blank=True)
    in_index = models.BooleanField(
        default=False, help_text="Written as a part of an index (with rel=index)."
    )
    last_key = models.BigIntegerField(
        null=True, blank=True, help_text="The greatest key in the document as written."
    )

    class Meta:
        ordering = ["resource_set", "after_key"]
        constraints = [
            models.UniqueConstraint(fields=["resource_set", "number"], name="unique_rl_page"),
            models.UniqueConstraint(fields=["resource_set", "after_key"], name="unique_rl_range"),
        ]

    kind = Capability.RESOURCE_LIST

    def __str__(self) -> str:
        return f"{self.resource_set} resourcelist-{self.number}"


class ChangeListPage(StoredDocument):
    resource_set = models.ForeignKey(
        ResourceSet, on_delete=models.CASCADE, related_name="change_list_pages"
    )
    since = models.DateTimeField()
    until = models.DateTimeField(null=True, blank=True, help_text="Set once the list is closed.")
    # More changes at one instant than a list holds split inside it, in change id order:
    # the closed list ends at (until, until_key), the next starts after (since, since_key).
    since_key = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="When the list starts inside its `since` instant: the previous list's "
        "last change id there.",
    )
    until_key = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="When the list ends inside its `until` instant: its last change id there.",
    )
    final = models.BooleanField(
        default=False, help_text="Written with every change up to `until`; never rewritten."
    )
    # Where the next version of the open list may append (sitemaps.change_list_append).
    last_key = models.BigIntegerField(
        null=True, blank=True, help_text="The change id of the last entry as written."
    )
    last_datetime = models.DateTimeField(
        null=True, blank=True, help_text="The datetime of the last entry as written."
    )
    max_key = models.BigIntegerField(
        null=True, blank=True, help_text="The greatest change id in the document as written."
    )
    resolved_with = models.CharField(
        max_length=64,
        blank=True,
        help_text="Digest of the url_prefix and resource_root_dir its URIs were resolved with.",
    )

    class Meta:
        # A list (package) that starts inside an instant comes after the one starting at it.
        ordering = ["resource_set", "since", models.F("since_key").asc(nulls_first=True)]
        constraints = [
            models.UniqueConstraint(fields=["resource_set", "number"], name="unique_cl_page"),
        ]

    kind = Capability.CHANGE_LIST

    def __str__(self) -> str:
        return f"{self.resource_set} changelist-{self.number}"


class IndexDocument(StoredDocument):
    """`resourcelist.xml` and `changelist.xml` of a set (a list or an index), and its archive."""

    class Kind(models.TextChoices):
        RESOURCE_LIST = Capability.RESOURCE_LIST.value
        CHANGE_LIST = Capability.CHANGE_LIST.value
        CHANGE_LIST_ARCHIVE = Capability.CHANGE_LIST_ARCHIVE.value

    resource_set = models.ForeignKey(
        ResourceSet, on_delete=models.CASCADE, related_name="index_documents"
    )
    kind = models.CharField(max_length=20, choices=Kind.choices)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["resource_set", "kind"], name="unique_index_doc"),
        ]

    def __str__(self) -> str:
        return f"{self.resource_set} {self.kind}.xml"

    @property
    def public_name(self) -> str:
        return f"{self.kind}.xml"


class RegenerationState(models.Model):
    """Progress of a set's documents against its change log."""

    resource_set = models.OneToOneField(
        ResourceSet, on_delete=models.CASCADE, related_name="regeneration_state"
    )
    through_change_id = models.BigIntegerField(
        default=0, help_text="Every change up to this id is reflected in the documents."
    )
    regenerated_at = models.DateTimeField(null=True, blank=True)
    duration = models.DurationField(null=True, blank=True)
    pages_written = models.PositiveIntegerField(default=0, help_text="In the last run.")
    running_since = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="The running run's last sign of life."
    )
    holder = models.CharField(
        max_length=200, blank=True, help_text="Host and process of the running run."
    )
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    scheduled_at = models.DateTimeField(
        null=True, blank=True, help_text="A regeneration task is queued for this time."
    )
    last_error = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"Regeneration of {self.resource_set}"


class RetiredDocument(models.Model):
    """A superseded version, kept readable for the grace period before cleanup deletes it.

    A reader that found the old name in its row a moment before the swap can
    still open it (RESOURCESYNC_SUPERSEDED_GRACE_SECONDS).
    """

    name = models.CharField(max_length=500, unique=True, help_text="Its storage name.")
    retired_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return self.name


# Dumps (ZIP packages with a manifest, spec §§ 11-12)


class DumpPackage(StoredDocument):
    """A ZIP package of a dump and the served copy of its `manifest.xml`.

    `storage_name`/`etag`/`size` are the ZIP's; `entries` counts its bitstreams.
    """

    md5 = models.CharField(max_length=32, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    manifest_name = models.CharField(max_length=500, blank=True)
    manifest_etag = models.CharField(max_length=64, blank=True)
    manifest_size = models.PositiveBigIntegerField(default=0)
    full = models.BooleanField(
        default=False, help_text="Closed on a limit (bitstreams or package size)."
    )
    skipped = models.JSONField(
        default=list,
        blank=True,
        help_text="Resources it could not package, their files out of step with their "
        "latest records: [{uri, reason}], at most a few hundred.",
    )
    skipped_count = models.PositiveIntegerField(default=0)
    superseded_count = models.PositiveIntegerField(
        default=0,
        help_text="Change Dump: earlier versions whose files later changes had replaced or "
        "deleted before a package took them (not in `skipped`: nothing to mend).",
    )

    class Meta:
        abstract = True

    @property
    def public_name(self) -> str:
        return f"{self.kind}-package-{self.number}.zip"

    @property
    def manifest_public_name(self) -> str:
        return f"{self.kind}-manifest-{self.number}.xml"


class ResourcePackage(DumpPackage):
    """A Resource Dump package: the resources whose keys are in `(after_key, through_key]`."""

    resource_set = models.ForeignKey(
        ResourceSet, on_delete=models.CASCADE, related_name="resource_packages"
    )
    after_key = models.BigIntegerField()
    through_key = models.BigIntegerField(null=True, blank=True, help_text="Empty on the tail.")
    last_key = models.BigIntegerField(null=True, blank=True)
    at = models.DateTimeField(null=True, blank=True)
    completed = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["resource_set", "after_key"]
        constraints = [
            models.UniqueConstraint(fields=["resource_set", "number"], name="unique_rd_package"),
            models.UniqueConstraint(fields=["resource_set", "after_key"], name="unique_rd_range"),
        ]

    kind = "resourcedump"

    def __str__(self) -> str:
        return f"{self.resource_set} {self.public_name}"


class ChangePackage(DumpPackage):
    """A Change Dump package: every change with `since <= datetime <= until` (and, at an
    instant split between two packages, only its own by change id).

    Packages follow the Change List windows; a window may need several. The
    open one (`until` empty) is rebuilt as changes arrive; a `final` one never is.
    """

    resource_set = models.ForeignKey(
        ResourceSet, on_delete=models.CASCADE, related_name="change_packages"
    )
    since = models.DateTimeField()
    until = models.DateTimeField(null=True, blank=True)
    # As ChangeListPage's: set when one instant's changes fill more than a package.
    since_key = models.BigIntegerField(null=True, blank=True)
    until_key = models.BigIntegerField(null=True, blank=True)
    final = models.BooleanField(default=False)

    class Meta:
        # A list (package) that starts inside an instant comes after the one starting at it.
        ordering = ["resource_set", "since", models.F("since_key").asc(nulls_first=True)]
        constraints = [
            models.UniqueConstraint(fields=["resource_set", "number"], name="unique_cd_package"),
        ]

    kind = "changedump"

    def __str__(self) -> str:
        return f"{self.resource_set} {self.public_name}"


class DumpDocument(StoredDocument):
    """`resourcedump.xml` / `changedump.xml` (number 0), or part n of its index."""

    class Kind(models.TextChoices):
        RESOURCE_DUMP = "resourcedump"
        CHANGE_DUMP = "changedump"

    resource_set = models.ForeignKey(
        ResourceSet, on_delete=models.CASCADE, related_name="dump_documents"
    )
    kind = models.CharField(max_length=20, choices=Kind.choices)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["resource_set", "kind", "number"], name="unique_dump_document"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.resource_set} {self.public_name}"

    @property
    def public_name(self) -> str:
        return f"{self.kind}.xml" if self.number == 0 else f"{self.kind}-{self.number}.xml"


class DumpState(models.Model):
    """How far a set's dumps follow its change log, and what the last dump run did."""

    resource_set = models.OneToOneField(
        ResourceSet, on_delete=models.CASCADE, related_name="dump_state"
    )
    through_change_id = models.BigIntegerField(
        default=0, help_text="Every change up to this id is reflected in the Resource Dump."
    )
    built_at = models.DateTimeField(null=True, blank=True)
    duration = models.DurationField(null=True, blank=True)
    packages_written = models.PositiveIntegerField(default=0, help_text="In the last run.")
    bytes_written = models.PositiveBigIntegerField(default=0, help_text="In the last run.")
    skipped = models.PositiveIntegerField(
        default=0, help_text="Resources or changes the last run could not package."
    )
    problem = models.TextField(blank=True, help_text="Why the last run built no dump.")

    def __str__(self) -> str:
        return f"Dumps of {self.resource_set}"


class StagedVersion(models.Model):
    """A dump package version a running regeneration stored and has not switched to yet.

    A run switches its packages together with the dump documents at its end
    (`sitemaps.dumps.switch`), which may come after the grace period: cleanup keeps
    what is staged. The next dump step of the set drops a failed run's rows.
    """

    resource_set = models.ForeignKey(
        ResourceSet, on_delete=models.CASCADE, related_name="staged_versions"
    )
    name = models.CharField(max_length=500, unique=True, help_text="Its storage name.")

    def __str__(self) -> str:
        return self.name
