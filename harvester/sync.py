"""One harvest run: the entry point shared by the command and the Celery task.

A `source_url` is first resolved to the Capability Lists it leads to
(`harvester.discovery`); several sets are harvested one after the other, each
into its own folder (`harvester.sets`). For each set it reads the Capability
List, runs a baseline, an incremental or an audit,
and keeps the state: copies are remembered as they land, and the sync point
moves only after a run without failures. The default incremental range runs
from the last sync point to now.

After an incremental run the sync point moves to the newest change applied,
as resync does, never to our own clock: a source publishes a change some time
after its `datetime` (the portal regenerates after a delay, and its clock is
not ours), and a sync point past it would leave that change out of every
later range.
"""

from __future__ import annotations

import datetime as dt
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from enum import StrEnum
from functools import partial
from pathlib import PurePosixPath

from harvester.audit import run_audit
from harvester.baseline import run_baseline
from harvester.client import HarvestClient
from harvester.config import HarvestConfig
from harvester.discovery import choose_set, discover_capability_lists
from harvester.incremental import run_incremental
from harvester.layout import ROOT, arrange, set_folder
from harvester.report import NoProgress, Progress, SyncReport, report_to_journal
from harvester.session import HarvestSession
from harvester.sets import failed_set, merge_reports
from harvester.state import STATE_FILE, StateError, SyncState, destination_lock, load_state
from harvester.walk import HarvestError, read_capabilities
from journal.models import RunKind
from journal.recording import record_run


class Mode(StrEnum):
    """What a run does."""

    BASELINE = "baseline"
    INCREMENTAL = "incremental"
    AUDIT = "audit"


def run_harvest(
    config: HarvestConfig,
    mode: Mode | str | None = None,
    *,
    range_from: dt.datetime | None = None,
    range_until: dt.datetime | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    now: dt.datetime | None = None,
) -> SyncReport:
    """Run one harvest of every set the config leads to, and report it.

    Without a mode, each set gets its default (see `default_mode`). Raises
    HarvestError/StateError when it cannot run (for several sets: when none
    can be found; one set failing is a failure in the report). The run is
    recorded in the journal under the URL given.
    """
    with record_run(kind=RunKind.HARVEST, target=config.source_url) as journal:
        report = _run_harvest(
            config,
            mode,
            range_from=range_from,
            range_until=range_until,
            dry_run=dry_run,
            progress=progress,
            now=now,
        )
        report_to_journal(report, journal)
    return report


def _run_harvest(
    config: HarvestConfig,
    mode: Mode | str | None,
    *,
    range_from: dt.datetime | None,
    range_until: dt.datetime | None,
    dry_run: bool,
    progress: Progress | None,
    now: dt.datetime | None,
) -> SyncReport:
    harvest_set = partial(
        run_set,
        mode=mode,
        range_from=range_from,
        range_until=range_until,
        dry_run=dry_run,
        progress=progress,
        now=now,
    )
    if config.capability_list_url is not None:
        return harvest_set(config)
    with HarvestClient(config) as client:
        urls = discover_capability_lists(client, config.source_url)
    writes = not dry_run and mode != Mode.AUDIT
    if config.set_name is not None:
        return harvest_set(named_set(config, config.set_name, urls, writes=writes))
    folders = arrange(config.destination, urls, writes=writes)
    if list(folders.values()) == [ROOT]:
        return harvest_set(replace(config, capability_list_url=urls[0]))
    parts: dict[PurePosixPath, SyncReport] = {}
    for url, folder in folders.items():
        destination = config.destination / folder
        try:
            parts[folder] = harvest_set(
                replace(config, capability_list_url=url, destination=destination)
            )
        except (HarvestError, StateError) as error:
            parts[folder] = failed_set(str(mode or "harvest"), url, error)
    return merge_reports(parts)


def named_set(
    config: HarvestConfig, set_name: str, urls: list[str], *, writes: bool
) -> HarvestConfig:
    """The config of the set `set:` names, in the folder the destination keeps for it."""
    chosen = choose_set(urls, set_name)
    folder = set_folder(config.destination, urls, chosen, writes=writes)
    return replace(config, capability_list_url=chosen, destination=config.destination / folder)


def run_set(
    config: HarvestConfig,
    mode: Mode | str | None,
    *,
    range_from: dt.datetime | None = None,
    range_until: dt.datetime | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    now: dt.datetime | None = None,
) -> SyncReport:
    """Harvest one set (a Capability List); raises HarvestError/StateError when it cannot run."""
    if mode is None:
        mode = Mode.INCREMENTAL if range_from or range_until else default_mode(config)
    mode = Mode(mode)
    now = now or dt.datetime.now(dt.UTC)
    if mode is not Mode.INCREMENTAL and (range_from or range_until):
        raise HarvestError("a time range applies to incremental runs only")
    report = SyncReport(mode=mode.value, dry_run=dry_run)
    writes = not dry_run and mode is not Mode.AUDIT
    with HarvestClient(config) as client:
        session = HarvestSession(
            config=config,
            client=client,
            state=current_state(config),
            report=report,
            progress=progress or NoProgress(),
            dry_run=dry_run,
        )
        # The first request, before anything is made: a wrong URL leaves no folder behind.
        capabilities = read_capabilities(session)
        if writes:
            config.destination.mkdir(parents=True, exist_ok=True)
        lock: AbstractContextManager[None] = (
            destination_lock(config.destination) if writes else nullcontext()
        )
        with lock:
            session.state = current_state(config)  # as it is now that we hold the lock
            sync_point: dt.datetime | None = None
            try:
                sync_point = run_mode(session, mode, capabilities, (range_from, range_until), now)
            finally:
                finish(session, mode, sync_point, now, writes=writes)
    return report


def run_mode(
    session: HarvestSession,
    mode: Mode,
    capabilities: dict[str, str],
    time_range: tuple[dt.datetime | None, dt.datetime | None],
    now: dt.datetime,
) -> dt.datetime | None:
    """Run the mode over the capabilities read; return the sync point it reached, if any."""
    if mode is Mode.BASELINE:
        return run_baseline(session, capabilities) or now
    if mode is Mode.INCREMENTAL:
        start, end = incremental_range(session.state, *time_range, now)
        session.report.range_from, session.report.range_until = start, end
        applied_until = run_incremental(session, capabilities, start, end)
        return None if applied_until is None else next_sync_point(session, start, applied_until)
    run_audit(session, capabilities)
    return None


def finish(
    session: HarvestSession,
    mode: Mode,
    sync_point: dt.datetime | None,
    now: dt.datetime,
    *,
    writes: bool,
) -> None:
    """Close the report; save the state, moving the sync point only after a clean run."""
    report, state = session.report, session.state
    report.finished = time.monotonic()
    if writes:
        if sync_point is not None and not report.failures:
            state.synced_until = report.sync_point = sync_point
        state.last_mode = mode.value
        state.last_run_at = now
        session.checkpoint(force=True)


def current_state(config: HarvestConfig) -> SyncState:
    """The destination's saved state, or a fresh one for a destination not made yet."""
    url = config.require_capability_list_url()
    if not config.destination.is_dir():
        return SyncState(capability_list_url=url)
    return load_state(config.destination, url)


def incremental_range(
    state: SyncState,
    range_from: dt.datetime | None,
    range_until: dt.datetime | None,
    now: dt.datetime,
) -> tuple[dt.datetime, dt.datetime]:
    """The requested range, defaulting to [last sync point, now]."""
    start = range_from or state.synced_until
    if start is None:
        raise HarvestError(
            "no earlier successful sync to continue from: run a baseline or give a start time"
        )
    end = range_until or now
    if start > end:
        raise HarvestError(
            f"the range starts ({start.isoformat()}) after it ends ({end.isoformat()})"
        )
    return start, end


def next_sync_point(
    session: HarvestSession, start: dt.datetime, end: dt.datetime
) -> dt.datetime | None:
    """Advance only over a range that joins the last sync point; never move backwards."""
    previous = session.state.synced_until
    if previous is not None and start > previous:
        session.report.warnings.append(
            f"the range starts after the last sync point ({previous.isoformat()}); "
            "the sync point stays where it was"
        )
        return None
    if previous is not None and end <= previous:
        return None
    return end


def default_mode(config: HarvestConfig) -> Mode:
    """Incremental once a baseline has succeeded at this destination, baseline before."""
    if not (config.destination / STATE_FILE).is_file():
        return Mode.BASELINE
    state = load_state(config.destination, config.require_capability_list_url())
    return Mode.INCREMENTAL if state.synced_until is not None else Mode.BASELINE
