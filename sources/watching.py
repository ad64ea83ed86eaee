"""Follow a set's folder: rescan soon after inotify reports a change, and every so often.

watchdog's inotify observer only says that something changed; the scan then
finds what (size and mtime first, so it reads only changed files). Events
are let settle for a moment so a burst of writes is one scan. Where inotify
cannot watch (another platform, a watch limit reached, a network share), the
loop falls back to rescanning every `interval` seconds; with it, that rescan
still runs as a safety net for events inotify dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .models import ResourceSet
from .scanning import ScanReport, scan_folder

logger = logging.getLogger(__name__)

#: Quiet time after an event before the scan starts.
SETTLE_SECONDS = 0.2
#: What opening and reading a file (our own hashing) reports: not a change.
_NOT_CHANGES = frozenset({"opened", "closed_no_write"})


def start_observer(root: str, changed: threading.Event):
    """An inotify observer that sets `changed`; None where none can run."""
    try:
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer
    except ImportError:
        logger.warning("watchdog is not installed: rescanning %s periodically", root)
        return None

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: FileSystemEvent) -> None:
            if event.event_type not in _NOT_CHANGES:
                changed.set()

    observer = Observer()
    try:
        observer.schedule(Handler(), root, recursive=True)
        observer.start()
    except OSError as error:  # e.g. the inotify watch limit
        logger.warning("cannot watch %s (%s): rescanning periodically", root, error)
        return None
    return observer


class FolderWatch:
    """Scan once, then again after each change (or every `interval` seconds) until stopped."""

    def __init__(
        self,
        resource_set: ResourceSet,
        *,
        interval: float,
        on_scan: Callable[[ScanReport], None] = lambda report: None,
        use_inotify: bool = True,
    ) -> None:
        self.resource_set = resource_set
        self.interval = interval
        self.on_scan = on_scan
        self.use_inotify = use_inotify
        self.changed = threading.Event()
        self.stopped = threading.Event()
        self.observer = None

    def stop(self) -> None:
        self.stopped.set()
        self.changed.set()

    def run(self) -> None:
        if self.use_inotify:
            self.observer = start_observer(self.resource_set.resource_root_dir, self.changed)
        try:
            self.scan()
            while not self.stopped.is_set():
                if self.changed.wait(timeout=self.interval):
                    self.stopped.wait(SETTLE_SECONDS)
                if self.stopped.is_set():
                    break
                self.scan()
        finally:
            if self.observer is not None:
                self.observer.stop()
                self.observer.join(timeout=5)

    def scan(self) -> None:
        self.changed.clear()  # before the scan: a change during it brings the next one
        self.on_scan(scan_folder(resource_set=self.resource_set))
