"""The Resource Dump: packages that own key ranges, rebuilt only where keys changed.

Exactly like Resource List pages (`sitemaps.planning`): each package holds
the resources whose keys lie in its range, so new resources touch only the
tail package, and an update or a delete rebuilds only the package holding
that key, copying every other bitstream over from its previous version. A
package that overflows a limit is closed at its last key and a new one
takes the rest; one that empties gives its range to the next.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

from sitemaps import planning
from sitemaps.models import ResourcePackage
from sitemaps.planning import KeyRange, Step
from sitemaps.protocol.builders import (
    DocumentTooLarge,
    build_resource_dump_manifest,
    resource_entry,
)
from sitemaps.protocol.records import ResourceRecord
from sitemaps.ranges import key_range, split_ranges
from sources.resource_files import packaged_path

from .job import DumpJob
from .packaging import Item, plan_package

RESOURCES_FOLDER = "/resources/"


class ResourceDumpWriter:
    """Brings one set's Resource Dump packages up to date."""

    def __init__(self, job: DumpJob) -> None:
        self.job = job
        self.resource_set = job.resource_set
        #: The highest package number, so a new package takes none this run had.
        self.highest = 0

    def run(self) -> list[ResourcePackage] | None:
        """The packages in key order, or None when none had to change."""
        packages, repaired = self.packages()
        dirty = list(packages) if self.job.full else self.plan(packages, repaired)
        if not dirty:
            return None
        self.write(packages, dirty)
        return packages

    def packages(self) -> tuple[list[ResourcePackage], set[int]]:
        """The packages in key order, and the positions to rebuild whatever changed.

        Rows change only at the run's switch: a new set's first package is made here.
        """
        packages = list(ResourcePackage.objects.filter(resource_set=self.resource_set))
        self.highest = max((package.number for package in packages), default=0)
        if not packages:
            packages = [self.new_package(after_key=0)]
        unwritten = {n for n, package in enumerate(packages) if package.generated_at is None}
        return packages, unwritten | self.repair_ranges(packages)

    def repair_ranges(self, packages: list[ResourcePackage]) -> set[int]:
        """Make the ranges tile every key again (rows left so by an older version); the
        positions changed, rebuilt and switched with their new ranges."""
        ranges = [key_range(package) for package in packages]
        fixed = planning.contiguous(ranges)
        repaired = planning.changed_positions(ranges, fixed)
        for position in sorted(repaired):
            package = packages[position]
            package.after_key, package.through_key = fixed[position].after, fixed[position].through
            self.job.switch.save(package)
        return repaired

    def new_package(self, *, after_key: int, through_key: int | None = None) -> ResourcePackage:
        """A package not written yet (the switch saves its row), numbered after any this
        run had."""
        self.highest += 1
        return ResourcePackage(
            resource_set=self.resource_set,
            number=self.highest,
            after_key=after_key,
            through_key=through_key,
        )

    def plan(self, packages: list[ResourcePackage], repaired: set[int]) -> list[ResourcePackage]:
        """The packages the new changes make dirty; a full tail that only gains keys is closed."""
        keys = (
            self.job.new_changes().exclude(resource_key=None).values_list("resource_key", flat=True)
        )
        tail = packages[-1]
        plan = planning.plan_rebuild(
            [key_range(package) for package in packages],
            (key for key in keys.distinct().iterator(chunk_size=10_000) if key is not None),
            full_tail_last_key=tail.last_key if tail.full and tail.storage_name else None,
        )
        if plan.close_tail_at is not None:
            self.split(packages, tail, plan.close_tail_at)
        return [packages[position] for position in sorted(plan.dirty | repaired)]

    def write(self, packages: list[ResourcePackage], dirty: list[ResourcePackage]) -> None:
        """Rebuild the dirty packages in key order; a full one spills into a new one."""
        queue = list(dirty)
        while queue:
            package = queue.pop(0)
            planned = plan_package(self.items(key_range(package)), self.job.limits, _render)
            last_key = planned.items[-1].record.key if planned.items else None
            step = planning.after_build(
                entries=len(planned.items),
                overflowed=planned.has_more,
                last_key=last_key,
                is_last=package is packages[-1],
                count=len(packages),
            )
            if step is Step.MERGE:
                self.merge(packages, package)
                continue
            if step is Step.SPLIT and last_key is not None:
                queue.insert(0, self.split(packages, package, last_key))
            package.last_key = last_key
            package.full = planned.has_more or len(planned.items) >= self.job.limits.entries
            package.at = self.job.at
            if not planned.items:  # the last package, emptied
                self.job.write_empty(package)
                continue
            self.job.write(package, planned.items, self.manifest, reuse=[package.storage_name])
            package.completed = package.generated_at  # saved by the switch

    def items(self, keys: KeyRange) -> Iterator[Item]:
        records = self.job.generator.iter_resources(
            self.resource_set, after=keys.after, through=keys.through
        )
        for record in records:
            relative = packaged_path(self.resource_set, record.uri)
            yield Item(record, RESOURCES_FOLDER + (relative or str(record.key)))

    def manifest(self, items: list[Item]) -> bytes:
        page = build_resource_dump_manifest(
            [(cast(ResourceRecord, item.record), item.path) for item in items],
            at=self.job.at,
            capability_list_url=self.job.capability_list_url,
            max_entries=self.job.limits.entries,
            max_bytes=self.job.limits.manifest_bytes,
        )
        if page.has_more:
            raise DocumentTooLarge("a Resource Dump Manifest outgrew the limits it was planned in")
        return page.content

    def split(
        self, packages: list[ResourcePackage], package: ResourcePackage, last_key: int
    ) -> ResourcePackage:
        """Close `package` at `last_key`; a new package after it takes the rest (both rows
        saved by the switch)."""
        head, rest = split_ranges(packages, package, last_key)
        package.through_key = head.through
        created = self.new_package(after_key=rest.after, through_key=rest.through)
        packages.insert(packages.index(package) + 1, created)
        self.job.switch.save(package)
        self.job.switch.save(created)
        return created

    def merge(self, packages: list[ResourcePackage], package: ResourcePackage) -> None:
        """An emptied package gives its range to the next one and goes (at the switch)."""
        position = packages.index(package)
        following = packages[position + 1]
        widened = planning.merge_into_next([key_range(p) for p in packages], position)[position]
        following.after_key = widened.after
        self.job.remove(package)
        self.job.switch.save(following)
        del packages[position]


def _render(item: Item) -> bytes:
    return resource_entry(item.record, path=item.path)  # type: ignore[arg-type]
