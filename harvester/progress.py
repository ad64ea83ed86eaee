"""How the `harvest` command shows progress: one bar on a terminal, plain lines in cron.

A run reports phases (`start(label, total)`) and steps (`advance`). Each
phase shows its own count under its own name (`packages`, `extract`,
`download (part 2 of 4)`): a run's later phases are not known when it starts
(a dump's manifests, an index's parts), so a figure for the whole run would
drop each time one began. A phase's figure only grows.
"""

from __future__ import annotations

import time
from typing import Any, TextIO

from tqdm import tqdm

from harvester.report import NoProgress

#: Plain progress lines: at most one per this many seconds, or per 10 % of the total.
LINE_SECONDS = 30.0
LINE_SHARE = 0.1


class BarProgress:
    """One tqdm bar, counting each phase from zero under the phase's name."""

    def __init__(self, stream: TextIO) -> None:
        self._bar: tqdm[Any] = tqdm(total=0, desc="harvest", unit="item", file=stream)

    def __enter__(self) -> BarProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._bar.close()

    def start(self, label: str, total: int) -> None:
        """Name the phase and count its steps from zero."""
        self._bar.set_description(label, refresh=False)
        self._bar.reset(total=total)

    def advance(self, count: int = 1) -> None:
        self._bar.update(count)


class LineProgress:
    """Plain lines for logs: `progress: 1200/5000 (24%) download`, now and then."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.done = self.total = 0
        self.label = ""
        self._last_time = time.monotonic()
        self._last_done = 0

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._finish()

    def start(self, label: str, total: int) -> None:
        """End the phase before (its last count shown) and count this one from zero."""
        self._finish()
        self.label, self.total = label, total
        self.done = self._last_done = 0

    def advance(self, count: int = 1) -> None:
        self.done += count
        due = time.monotonic() - self._last_time >= LINE_SECONDS
        if due or self.done - self._last_done >= max(self.total * LINE_SHARE, 1):
            self._line()

    def _finish(self) -> None:
        if self.done != self._last_done:
            self._line()

    def _line(self) -> None:
        share = f" ({self.done * 100 // self.total}%)" if self.total else ""
        self.stream.write(f"progress: {self.done}/{self.total}{share} {self.label}\n")
        self.stream.flush()
        self._last_time, self._last_done = time.monotonic(), self.done


class QuietProgress(NoProgress):
    """No progress at all (`-v 0`)."""

    def __enter__(self) -> QuietProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Nothing to close."""


def progress_for(
    stream: TextIO, *, quiet: bool = False
) -> BarProgress | LineProgress | QuietProgress:
    """A bar on a terminal, lines anywhere else (cron, a log file, a pipe), none when quiet."""
    if quiet:
        return QuietProgress()
    return BarProgress(stream) if stream.isatty() else LineProgress(stream)
