"""The things one harvest run shares: configuration, client, state and report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from harvester.client import HarvestClient
from harvester.config import HarvestConfig
from harvester.mapping import CheckedFolders
from harvester.report import DEFERRED, NoProgress, Outcome, Progress, SyncReport
from harvester.state import LocalCopy, SyncState, save_state

#: Save the state at least this often (seconds) during a long run, so a crash loses little.
CHECKPOINT_SECONDS = 30.0
#: ...but spend at most about this share of the run saving it: a save takes time
#: in proportion to the resources known, and holds up the downloads meanwhile.
CHECKPOINT_SHARE = 0.1


@dataclass(slots=True)
class HarvestSession:
    """One run's context; only the thread that owns it records outcomes."""

    config: HarvestConfig
    client: HarvestClient
    state: SyncState
    report: SyncReport
    progress: Progress = field(default_factory=NoProgress)
    dry_run: bool = False
    #: A baseline reading a live source: a resource gone or changed since the
    #: Resource List is left to the incremental run, not failed.
    defer_changes: bool = False
    #: Folders under the destination already checked for links in this run.
    folders: CheckedFolders = field(default_factory=CheckedFolders)
    _last_checkpoint: float = field(default_factory=time.monotonic)
    _checkpoint_interval: float = CHECKPOINT_SECONDS

    @property
    def destination(self) -> Path:
        """The destination directory."""
        return self.config.destination

    def record(
        self, outcome: Outcome, *, copy: LocalCopy | None = None, forget: bool = False
    ) -> None:
        """Count an outcome; remember the copy it produced, forget a deleted one, or
        note one a baseline left unsettled."""
        self.report.add(outcome)
        if not self.dry_run:
            if outcome.action in DEFERRED:
                self.state.unsettled[outcome.uri] = outcome.reason
            elif copy is not None:
                self.state.resources[outcome.uri] = copy
            elif forget:
                self.state.resources.pop(outcome.uri, None)
        self.progress.advance()
        self.checkpoint()

    def checkpoint(self, *, force: bool = False) -> None:
        """Save the state if enough time has passed (or when forced)."""
        if self.dry_run:
            return
        now = time.monotonic()
        if force or now - self._last_checkpoint >= self._checkpoint_interval:
            save_state(self.destination, self.state)
            self._last_checkpoint = time.monotonic()
            took = self._last_checkpoint - now
            self._checkpoint_interval = max(CHECKPOINT_SECONDS, took / CHECKPOINT_SHARE)
