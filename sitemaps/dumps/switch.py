"""One switch per run: the dump packages it rebuilt, with the dump documents that list them.

A run stores each new package version beside the served one (content-addressed
names) and stages it here: the rows, and so the URLs and the published links,
stay on the previous versions until the end of the run, where `apply` points
them all at the new ones together with the dump documents, in one transaction.
Only then is what the new dumps no longer list withdrawn: packages merged
away or left over, and the parts of a dump index that shrank. A run that
fails anywhere before the commit switches nothing: each dump document served
lists its packages with the length and hashes they are served with, and none
of them answers 404. The work is one row and one link per package the run
wrote or removed, so a run stays O(packages).
"""

from __future__ import annotations

import logging
from collections.abc import Set
from dataclasses import dataclass, field

from sitemaps import publishing
from sitemaps.cleanup import expire_retired_when_due
from sitemaps.lease import Lease
from sitemaps.models import DumpDocument, DumpPackage, StagedVersion
from sitemaps.storage import retire_documents
from sources.models import ResourceSet

logger = logging.getLogger(__name__)


@dataclass
class DumpSwitch:
    """What a run's dump step switches at its end, and the versions that then retire."""

    resource_set: ResourceSet
    lease: Lease
    #: By identity (`id`): a new package has no primary key before the switch.
    packages: dict[int, DumpPackage] = field(default_factory=dict)
    removed: dict[int, DumpPackage] = field(default_factory=dict)
    documents: list[DumpDocument] = field(default_factory=list)
    surplus: list[DumpDocument] = field(default_factory=list)
    retired: set[str] = field(default_factory=set)

    def stage(self, names: list[str]) -> None:
        """Keep these stored versions from cleanup until the switch (or the next run)."""
        StagedVersion.objects.bulk_create(
            [StagedVersion(resource_set=self.resource_set, name=name) for name in names if name],
            ignore_conflicts=True,
        )

    def save(self, package: DumpPackage, *, replaced: Set[str] = frozenset()) -> None:
        """Save the package's row (its new version, range or both) at the switch."""
        self.packages[id(package)] = package
        self.retired |= replaced - {package.storage_name, package.manifest_name, ""}

    def remove(self, package: DumpPackage) -> None:
        """Delete the package's row at the switch and withdraw it once the dumps drop it."""
        self.packages.pop(id(package), None)
        if package.pk is not None:
            self.removed[id(package)] = package
        self.retired |= {package.storage_name, package.manifest_name} - {""}

    def removes(self, package: DumpPackage) -> bool:
        return id(package) in self.removed

    def write(self, document: DumpDocument, *, replaced: str) -> None:
        """Point the dump document at its new version (stored) at the switch; parts first."""
        self.stage([document.storage_name])
        self.documents.append(document)
        if replaced and replaced != document.storage_name:
            self.retired.add(replaced)

    def withdraw(self, document: DumpDocument) -> None:
        """A part the dump no longer needs: its row goes at the switch, its link after the
        dump's is switched."""
        self.surplus.append(document)
        self.retired.add(document.storage_name)

    def apply(self) -> None:
        """Switch every row and link at once, retiring the versions they replaced."""
        if not (self.packages or self.removed or self.documents or self.surplus):
            return
        try:
            with self.lease.holding():
                self._save_rows()
                self._link()
        except BaseException:
            _restore_links(self.resource_set)
            raise
        expire_retired_when_due()

    def _save_rows(self) -> None:
        # Rows that go first: a package merged away leaves its range start to the next one.
        for package in self.removed.values():
            package.delete()
        for package in sorted(self.packages.values(), key=lambda p: p.pk is None):  # new last
            package.save()
        for document in self.documents:
            document.save()
        for document in self.surplus:
            document.delete()
        StagedVersion.objects.filter(resource_set=self.resource_set).delete()
        retire_documents(self.retired)

    def _link(self) -> None:
        """The links follow the rows; a package emptied or removed, and a surplus part, are
        unlinked after the dumps drop them."""
        packages = self.packages.values()
        for package in [package for package in packages if package.storage_name]:
            publishing.publish_package(self.resource_set, package)
        for document in self.documents:
            publishing.publish(self.resource_set, document)
        for package in [package for package in packages if not package.storage_name]:
            publishing.publish_package(self.resource_set, package)
        for package in self.removed.values():
            publishing.withdraw_package(self.resource_set, package)
        for document in self.surplus:
            publishing.withdraw(self.resource_set, document)


def recover(resource_set: ResourceSet) -> None:
    """Forget what a failed run staged (one run holds the set: nothing switches to it), and
    after one killed while it switched, put the published tree back on the rows."""
    dropped, _ = StagedVersion.objects.filter(resource_set=resource_set).delete()
    if dropped:
        _restore_links(resource_set)


def _restore_links(resource_set: ResourceSet) -> None:
    """After a failed switch: the published tree back on the rows, which rolled back."""
    try:
        publishing.publish_set(resource_set)
    except Exception:
        logger.exception(
            "%s: the published tree may not match the dumps; run manage.py publish", resource_set
        )
