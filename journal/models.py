"""The journal: one row per run of any kind, what an operator reads first.

A run is inserted when it starts and updated once when it ends
(`journal.recording.record_run`); a long run also writes a heartbeat now and
then. Nothing else writes here but the marking of runs whose process is gone
(`journal.liveness`) and the pruning of runs older than the retention period.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import models
from django.db.models import Q

from sources.models import ResourceSet


class RunKind(models.TextChoices):
    REGENERATION = "regeneration"
    SCAN = "scan"
    EXPORT = "export"
    DUMP = "dump"
    HARVEST = "harvest"


class Outcome(models.TextChoices):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class Run(models.Model):
    """One run: what it worked on, when, what it wrote, and how it ended."""

    kind = models.CharField(max_length=20, choices=RunKind.choices)
    resource_set = models.ForeignKey(
        ResourceSet,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="runs",
        help_text="Empty for a harvest of another source.",
    )
    target = models.CharField(
        max_length=1000,
        help_text="The set as provider/set, or the URL harvested (kept if the set is deleted).",
    )
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=10, choices=Outcome.choices, default=Outcome.RUNNING)
    events = models.BigIntegerField(default=0, help_text="Change events recorded or applied.")
    resources = models.BigIntegerField(default=0, help_text="Resources copied.")
    pages = models.BigIntegerField(default=0, help_text="Documents written.")
    packages = models.BigIntegerField(default=0, help_text="Dump packages written.")
    bytes = models.BigIntegerField(default=0, help_text="Bytes written or copied.")
    error = models.TextField(blank=True)
    detail = models.JSONField(default=dict, blank=True, help_text="What the run reported.")
    host = models.CharField(max_length=255, blank=True, help_text="The host the run ran on.")
    pid = models.PositiveIntegerField(null=True, blank=True, help_text="Its process id there.")
    process_start = models.CharField(
        max_length=80,
        blank=True,
        help_text="When that process started (boot id/clock ticks), to tell a reused pid.",
    )
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="The last sign of life of a long run."
    )

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            models.Index(fields=["started_at"], name="run_started"),
            models.Index(fields=["resource_set", "-started_at"], name="run_of_set"),
            models.Index(fields=["kind", "-started_at"], name="run_of_kind"),
            # The few runs still running, which every read of the journal checks.
            models.Index(fields=["started_at"], name="run_running", condition=Q(outcome="running")),
        ]

    def __str__(self) -> str:
        return f"{self.kind} of {self.target} at {self.started_at:%Y-%m-%d %H:%M:%S %Z}"

    @property
    def duration(self) -> timedelta | None:
        """How long it ran; None while it runs (or if it never recorded its end)."""
        if self.finished_at is None:
            return None
        return self.finished_at - self.started_at

    def count(self, **counts: int) -> None:
        """Add to the run's counts (events, resources, pages, packages, bytes)."""
        for name, value in counts.items():
            if name not in COUNTS:
                raise TypeError(f"a run counts {', '.join(COUNTS)}, not {name}")
            setattr(self, name, getattr(self, name) + value)

    def fail(self, error: str) -> None:
        """Mark the run failed without raising (e.g. a harvest with failed resources)."""
        self.error = error
        self.outcome = Outcome.FAILED


#: The counts a run carries, in the order people read them.
COUNTS = ("events", "resources", "pages", "packages", "bytes")


def run_counts(run: Run) -> str:
    """'4 pages, 16950 bytes': the counts that are not zero, for lists and the command."""
    counts = [f"{getattr(run, name)} {name}" for name in COUNTS if getattr(run, name)]
    return ", ".join(counts) or "nothing written"
