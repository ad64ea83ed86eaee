"""A set's regeneration as people read it: idle, running (with what is written), or stopped.

Read-only: the admin's list, the set page and its JSON status endpoint share it.
Progress counts Change Lists and Resource List pages: the run beats its totals
into RegenerationState, and what it has written so far is the pages stored
since it started.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any

from django.utils import timezone

from journal.models import Run, RunKind
from sitemaps.models import ChangeListPage, RegenerationState, ResourceListPage
from sitemaps.selectors import lease_is_dead
from sources.models import ResourceSet

from .overview import local_time


@dataclass(frozen=True)
class RegenerationStatus:
    """What a set's regeneration is doing now, and how the last run ended."""

    state: str  # "idle", "running" or "stopped"
    text: str
    done: int = 0
    total: int = 0
    change_lists_written: int = 0
    resource_list_pages_written: int = 0
    last_run_id: int | None = None
    last_run_outcome: str = ""
    last_run_text: str = ""

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def regeneration_state(resource_set: ResourceSet) -> RegenerationState | None:
    try:
        return resource_set.regeneration_state
    except RegenerationState.DoesNotExist:
        return None


def last_regeneration_text(state: RegenerationState | None) -> str:
    """When the last run ended, what it wrote, and its error if it failed."""
    if state is None or state.regenerated_at is None:
        return "never" if state is None or not state.last_error else f"failed: {state.last_error}"
    if state.pages_written:
        written = f"{state.pages_written} document(s) rewritten"
    else:
        written = "nothing to rewrite"
    error = f" — failed since: {state.last_error}" if state.last_error else ""
    return f"{local_time(state.regenerated_at)} ({written}){error}"


def running_text(state: RegenerationState, now: dt.datetime) -> tuple[str, str]:
    """The state name and a line for a set whose lease is held."""
    if lease_is_dead(state, now):
        holder = state.holder or "unknown run"
        return "stopped", f"stopped without finishing ({holder}); the next run takes over"
    return "running", (
        f"running: {state.progress_done} of {state.progress_total} documents written "
        f"(Change Lists and Resource List pages; {state.holder})"
    )


def regeneration_status(
    resource_set: ResourceSet, now: dt.datetime | None = None
) -> RegenerationStatus:
    """The set's regeneration now, with the pages written by a running run, by kind."""
    now = now or timezone.now()
    state = regeneration_state(resource_set)
    last = (
        Run.objects.filter(resource_set=resource_set, kind=RunKind.REGENERATION)
        .exclude(outcome="running")
        .first()
    )
    last_fields: dict[str, Any] = {
        "last_run_id": last.pk if last else None,
        "last_run_outcome": last.outcome if last else "",
        "last_run_text": last_regeneration_text(state),
    }
    if state is None or state.running_since is None:
        return RegenerationStatus(state="idle", text="idle", **last_fields)
    name, text = running_text(state, now)
    since = {"resource_set": resource_set, "generated_at__gte": state.running_since}
    return RegenerationStatus(
        state=name,
        text=text,
        done=state.progress_done,
        total=state.progress_total,
        change_lists_written=ChangeListPage.objects.filter(**since).count(),
        resource_list_pages_written=ResourceListPage.objects.filter(**since).count(),
        **last_fields,
    )
