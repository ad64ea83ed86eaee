"""Read-only views of a set's dumps, for the admin."""

from __future__ import annotations

from dataclasses import dataclass, field

from sitemaps.models import ChangePackage, DumpState, ResourcePackage
from sources.models import ResourceSet


@dataclass
class DumpStatus:
    """Packages, their sizes, the last dump run and what the current packages lack."""

    resource_packages: list[ResourcePackage] = field(default_factory=list)
    change_packages: list[ChangePackage] = field(default_factory=list)
    state: DumpState | None = None
    skipped: list[dict[str, str]] = field(default_factory=list)
    skipped_count: int = 0
    #: Change Dump versions whose files later changes replaced first: no fault (see job.py).
    superseded_count: int = 0

    @property
    def total_bytes(self) -> int:
        return sum(p.size for p in [*self.resource_packages, *self.change_packages])


def dump_status(resource_set: ResourceSet, *, shown: int = 20) -> DumpStatus:
    """What the set's dumps hold now; `shown` skipped resources at most are listed."""
    columns = (
        "number",
        "size",
        "entries",
        "skipped",
        "skipped_count",
        "superseded_count",
        "storage_name",
    )
    status = DumpStatus(
        resource_packages=list(
            ResourcePackage.objects.filter(resource_set=resource_set).only(*columns)
        ),
        change_packages=list(
            ChangePackage.objects.filter(resource_set=resource_set).only(*columns)
        ),
        state=DumpState.objects.filter(resource_set=resource_set).first(),
    )
    for package in [*status.resource_packages, *status.change_packages]:
        status.skipped_count += package.skipped_count
        status.superseded_count += package.superseded_count
        room = max(shown - len(status.skipped), 0)
        status.skipped.extend(
            {**item, "package": package.public_name} for item in package.skipped[:room]
        )
    return status
