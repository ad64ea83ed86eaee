"""The Change Dump: packages over the Change List windows, closed ones written once.

Each Change List window `[since, until]` gets one package, or several when
it outgrows a package's limits; a package then closes at a datetime (never
between two changes of the same instant), so it holds every change of its
interval, unless one instant fills it alone: then it closes inside that
instant, after a change (`until_key`), where the next one starts. Lists
split inside one instant (more changes at it than a list holds) are one
window here. Packages of the open window are rebuilt as changes arrive; a
package whose interval is closed and fully visible to the generator is
`final` and never rebuilt. A rebuilt package copies the bitstreams its
previous version holds: the bytes of a version whose file was overwritten
since survive that way. A change whose bytes the portal no longer has (the
file changed before any package took it) is left out and reported; a package
left with none of its changes has no ZIP and is not listed, as a window
without changes has no package (a manifest without <url> is no valid Sitemap).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

from sitemaps.models import ChangeListPage, ChangePackage
from sitemaps.protocol.builders import DocumentTooLarge, build_change_dump_manifest, change_entry
from sitemaps.protocol.constants import ChangeType
from sitemaps.protocol.records import ChangeRecord
from sources.resource_files import packaged_path

from .job import DumpJob
from .packaging import Item, Planned, plan_package

ONE_MICROSECOND = timedelta(microseconds=1)
CHANGES_FOLDER = "/changes/"
#: Where a package starts: an instant, and the change id there after which (None: all of it).
Start = tuple[datetime, int | None]


@dataclass(frozen=True)
class Window:
    """The interval of one Change List, or of consecutive lists split inside an instant."""

    since: datetime
    until: datetime | None


def dump_windows(pages: list[ChangeListPage]) -> list[Window]:
    """The Change List windows, a list that starts inside the previous one's last instant
    (`since_key`) joined to it: a package closes only between two instants."""
    windows: list[Window] = []
    for page in pages:
        if page.since_key is not None and windows:
            windows[-1] = Window(windows[-1].since, page.until)
        else:
            windows.append(Window(page.since, page.until))
    return windows


class ChangeDumpWriter:
    """Brings one set's Change Dump packages up to date with its Change List windows."""

    def __init__(self, job: DumpJob) -> None:
        self.job = job
        self.resource_set = job.resource_set
        #: Packages this run made, and the highest number taken (none is reused in a run).
        self.created: list[ChangePackage] = []
        self.highest = 0

    def run(self) -> list[ChangePackage] | None:
        """Every package oldest first, as the run's switch will save them; or None when
        none had to change."""
        windows = dump_windows(list(ChangeListPage.objects.filter(resource_set=self.resource_set)))
        packages = list(ChangePackage.objects.filter(resource_set=self.resource_set))
        self.highest = max((package.number for package in packages), default=0)
        touched = list(self.job.new_changes().values_list("datetime", flat=True))
        settled = max(
            (p.until for p in packages if p.final and p.until and p.until_key is None), default=None
        )
        changed = False
        for window in windows:
            if settled is not None and window.until is not None and window.until <= settled:
                continue  # before the newest final package: done (or without changes)
            mine = [package for package in packages if _in_window(package, window)]
            if self.job.full or self.needs_writing(window, mine, touched):
                self.fill(window, mine)
                changed = True
        if not changed:
            return None
        kept = [package for package in packages if not self.job.switch.removes(package)]
        return sorted(kept + self.created, key=_order)

    def needs_writing(
        self, window: Window, mine: list[ChangePackage], touched: list[datetime]
    ) -> bool:
        """Whether the window's packages are missing, stale, or still to be closed."""
        open_ones = [package for package in mine if not package.final]
        if mine and not open_ones:
            return mine[-1].until != window.until  # final, unless the window reached further
        if not mine or any(not package.storage_name for package in open_ones):
            return True
        if window.until is not None:
            return True  # the window closed: its open packages are written final
        start = open_ones[0].since
        return any(start <= moment for moment in touched)

    def fill(self, window: Window, mine: list[ChangePackage]) -> None:
        """Rewrite the window's packages from its first one not final."""
        keep = [] if self.job.full else _final_prefix(mine)
        redo = mine[len(keep) :]
        reuse = [package.storage_name for package in redo if package.storage_name]
        start: Start = _after(keep[-1]) if keep and keep[-1].until else (window.since, None)
        while True:
            planned, until_key = self.plan(start, window.until)
            if not planned.items:
                break  # no changes (left) in the window: no package for them
            until = window.until if not planned.has_more else _when(planned.items[-1])
            package = redo.pop(0) if redo else self.new_package(start[0])
            package.since_key, package.until_key = start[1], until_key
            self.write(package, planned, since=start[0], until=until, reuse=reuse)
            if not planned.has_more or until is None:
                break
            start = _after(package)
        for leftover in redo:
            self.job.remove(leftover)

    def plan(self, start: Start, until: datetime | None) -> tuple[Planned, int | None]:
        """The changes from `start` that fit one package, closed between two instants; or,
        when one instant fills it alone, inside it, with the key of its last change."""
        planned = plan_package(self.items(start, until), self.job.limits, _render)
        if not planned.has_more or planned.following is None:
            return planned, None
        instant = _when(planned.following)
        whole = [item for item in planned.items if _when(item) < instant]
        if not whole:
            return planned, cast(ChangeRecord, planned.items[-1].record).key
        return Planned(whole, has_more=True), None

    def items(self, start: Start, until: datetime | None) -> Iterator[Item]:
        since, key = start
        after = None if key is None else (since, key)
        for record in self.job.run.visible_changes(since, until, after):
            yield Item(record, change_path(self.resource_set, record))

    def new_package(self, since: datetime) -> ChangePackage:
        """A package not written yet: the switch saves its row."""
        self.highest += 1
        package = ChangePackage(resource_set=self.resource_set, number=self.highest, since=since)
        self.created.append(package)
        return package

    def write(
        self,
        package: ChangePackage,
        planned: Planned,
        *,
        since: datetime,
        until: datetime | None,
        reuse: list[str],
    ) -> None:
        package.since, package.until = since, until
        package.final = until is not None and self.job.complete_through(until)
        package.full = planned.has_more

        def manifest(items: list[Item]) -> bytes:
            page = build_change_dump_manifest(
                [(cast(ChangeRecord, item.record), item.path) for item in items],
                since=since,
                until=until,
                capability_list_url=self.job.capability_list_url,
                max_entries=self.job.limits.entries,
                max_bytes=self.job.limits.manifest_bytes,
            )
            if page.has_more:
                raise DocumentTooLarge(
                    "a Change Dump Manifest outgrew the limits it was planned in"
                )
            return page.content

        self.job.write(package, planned.items, manifest, reuse=reuse)


def change_path(resource_set, record: ChangeRecord) -> str:
    """Where a change's bitstream lies in its package: one folder per change ("" if deleted)."""
    if record.change == ChangeType.DELETED:
        return ""
    relative = packaged_path(resource_set, record.uri) or "resource"
    return f"{CHANGES_FOLDER}{record.key}/{relative}"


def _order(package: ChangePackage) -> tuple[datetime, bool, int]:
    """The rows' order (`since`, then `since_key` with none first)."""
    return package.since, package.since_key is not None, package.since_key or 0


def _in_window(package: ChangePackage, window: Window) -> bool:
    return package.since >= window.since and (window.until is None or package.since <= window.until)


def _after(package: ChangePackage) -> Start:
    """Where the package after `package` starts: inside its last instant if it split it."""
    assert package.until is not None
    if package.until_key is not None:
        return package.until, package.until_key
    return package.until + ONE_MICROSECOND, None


def _final_prefix(packages: list[ChangePackage]) -> list[ChangePackage]:
    """The leading packages that are final (they are kept as they are)."""
    kept = []
    for package in packages:
        if not package.final:
            break
        kept.append(package)
    return kept


def _when(item: Item) -> datetime:
    return cast(ChangeRecord, item.record).datetime


def _render(item: Item) -> bytes:
    return change_entry(item.record, path=item.path)  # type: ignore[arg-type]
