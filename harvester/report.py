"""What a harvest did, as counts a person or a monitor can act on."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from journal.models import Run

#: Failures and deferred resources kept in the journal's copy of a report.
JOURNAL_LISTED = 20


class Action(StrEnum):
    """What happened to one resource."""

    DOWNLOADED = "downloaded"
    DELETED = "deleted"
    SKIPPED = "skipped"
    FAILED = "failed"
    #: Listed by the Resource List but not there when a baseline fetched it.
    GONE = "gone"
    #: Listed by the Resource List, but its bytes differed when a baseline fetched it.
    CHANGED = "changed"


#: What a baseline leaves to the next incremental run instead of failing.
DEFERRED = frozenset({Action.GONE, Action.CHANGED})


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of handling one resource (or one document or package that failed)."""

    uri: str
    action: Action
    bytes: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Difference:
    """A resource whose local copy differs from the source's listing."""

    uri: str
    reason: str


@dataclass(slots=True)
class AuditResult:
    """Coverage (missing, extra) and accuracy (changed) of the destination."""

    same: int = 0
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    changed: list[Difference] = field(default_factory=list)

    @property
    def in_sync(self) -> bool:
        """True when every listed resource is present and unchanged and nothing else is."""
        return not (self.missing or self.extra or self.changed)


@dataclass(slots=True)
class SyncReport:
    """Counts and failures of one run; `ok` is what exit codes and tasks key on."""

    mode: str
    dry_run: bool = False
    range_from: dt.datetime | None = None
    range_until: dt.datetime | None = None
    sync_point: dt.datetime | None = None
    downloaded: int = 0
    deleted: int = 0
    skipped: int = 0
    bytes: int = 0
    failures: list[Outcome] = field(default_factory=list)
    deferred: list[Outcome] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    audit: AuditResult | None = None
    #: With several sets: each set's own report, by its folder under the destination.
    sets: dict[str, SyncReport] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None

    @property
    def failed(self) -> int:
        """How many resources, documents or packages failed."""
        return len(self.failures)

    @property
    def gone(self) -> int:
        """Resources that disappeared between the Resource List and their GET."""
        return sum(1 for outcome in self.deferred if outcome.action is Action.GONE)

    @property
    def changed(self) -> int:
        """Resources whose bytes changed between the Resource List and their GET."""
        return sum(1 for outcome in self.deferred if outcome.action is Action.CHANGED)

    @property
    def ok(self) -> bool:
        """No failures, and for an audit, no differences."""
        return not self.failures and (self.audit is None or self.audit.in_sync)

    @property
    def elapsed(self) -> float:
        """Seconds from start to finish (or to now while running)."""
        return (self.finished or time.monotonic()) - self.started

    def add(self, outcome: Outcome) -> None:
        """Count one outcome."""
        if outcome.action is Action.DOWNLOADED:
            self.downloaded += 1
            self.bytes += outcome.bytes
        elif outcome.action is Action.DELETED:
            self.deleted += 1
        elif outcome.action is Action.SKIPPED:
            self.skipped += 1
        elif outcome.action in DEFERRED:
            self.deferred.append(outcome)
        else:
            self.failures.append(outcome)

    def fail(self, uri: str, reason: str) -> None:
        """Record a failure that is not tied to one resource's transfer."""
        self.add(Outcome(uri=uri, action=Action.FAILED, reason=reason))

    def summary(self) -> str:
        """One line for people: what was done, how much, how long."""
        took = f"in {self.elapsed:.1f} s"
        if self.audit is not None:
            return (
                f"audit: {self.audit.same} same, {len(self.audit.missing)} missing, "
                f"{len(self.audit.extra)} extra, {len(self.audit.changed)} changed, "
                f"failed {self.failed} {took}"
            )
        verb = "would download" if self.dry_run else "downloaded"
        deferred = (
            f"; {self.gone} gone and {self.changed} changed while read, "
            "left to the next incremental run"
            if self.deferred
            else ""
        )
        return (
            f"{self.mode}{' (dry run)' if self.dry_run else ''}: {verb} {self.downloaded}, "
            f"deleted {self.deleted}, skipped {self.skipped}, failed {self.failed}, "
            f"{_size(self.bytes)} {took}{deferred}"
        )

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary, for task results and logs."""
        result: dict[str, Any] = {
            "mode": self.mode,
            "dry_run": self.dry_run,
            "ok": self.ok,
            "range_from": _iso(self.range_from),
            "range_until": _iso(self.range_until),
            "sync_point": _iso(self.sync_point),
            "downloaded": self.downloaded,
            "deleted": self.deleted,
            "skipped": self.skipped,
            "failed": self.failed,
            "bytes": self.bytes,
            "seconds": round(self.elapsed, 3),
            "gone": self.gone,
            "changed": self.changed,
            "failures": [{"uri": item.uri, "reason": item.reason} for item in self.failures],
            "deferred": [
                {"uri": item.uri, "action": item.action.value, "reason": item.reason}
                for item in self.deferred
            ],
            "warnings": list(self.warnings),
        }
        if self.sets:
            result["sets"] = {folder: part.as_dict() for folder, part in self.sets.items()}
        if self.audit is not None:
            result["audit"] = {
                "same": self.audit.same,
                "missing": list(self.audit.missing),
                "extra": list(self.audit.extra),
                "changed": [{"uri": d.uri, "reason": d.reason} for d in self.audit.changed],
            }
        return result


def report_to_journal(report: SyncReport, run: Run) -> None:
    """Counts, a short report, and failed when anything failed or an audit differs."""
    run.count(
        events=report.downloaded + report.deleted, resources=report.downloaded, bytes=report.bytes
    )
    detail = report.as_dict()
    for listed in ("failures", "deferred"):
        detail[listed] = detail[listed][:JOURNAL_LISTED]
    detail.pop("sets", None)
    run.detail = detail
    if report.failures:
        run.fail(
            f"{report.failed} failed, e.g. {report.failures[0].uri}: {report.failures[0].reason}"
        )
    elif not report.ok:
        run.fail("the destination differs from the source")


class Progress(Protocol):
    """Where a run reports progress; the command plugs a tqdm bar in here."""

    def start(self, label: str, total: int) -> None:
        """A new phase begins with `total` steps."""

    def advance(self, count: int = 1) -> None:
        """`count` steps of the current phase are done."""


class NoProgress:
    """Progress that goes nowhere: the default for tasks and tests."""

    def start(self, label: str, total: int) -> None:
        """Ignore the phase."""

    def advance(self, count: int = 1) -> None:
        """Ignore the step."""


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _size(count: int) -> str:
    size = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"
