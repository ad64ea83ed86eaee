"""Build a set's dumps as a step of its regeneration run."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from django.utils import timezone

from sitemaps.models import ChangePackage, DumpDocument, ResourcePackage
from sources.models import ResourceSet
from sources.resource_files import unreadable_reason

from .change_dump import ChangeDumpWriter
from .documents import write_change_dump, write_resource_dump
from .job import DumpJob, DumpReport
from .resource_dump import ResourceDumpWriter

if TYPE_CHECKING:
    from sitemaps.regeneration import RegenerationRun

logger = logging.getLogger(__name__)


def dump_problem(resource_set: ResourceSet) -> str | None:
    """Why the set cannot publish the dumps its settings ask for, or None."""
    capabilities = resource_set.capabilities
    return settings_problem(
        resource_set,
        resource_dump=capabilities.publish_resource_dump,
        change_dump=capabilities.publish_change_dump,
        change_list=capabilities.publish_change_list,
    )


def settings_problem(
    resource_set: ResourceSet, *, resource_dump: bool, change_dump: bool, change_list: bool
) -> str | None:
    """Why these capability settings cannot publish their dumps (for forms too), or None."""
    if not (resource_dump or change_dump):
        return None
    if change_dump and not change_list:
        return "the Change Dump follows the Change List's windows: publish the Change List too"
    return unreadable_reason(resource_set)


def build_dumps(run: RegenerationRun) -> DumpReport | None:
    """Bring the set's dumps up to date as part of a regeneration run; None if it has none."""
    capabilities = run.capabilities
    if not (capabilities.publish_resource_dump or capabilities.publish_change_dump):
        return None
    started = time.monotonic()
    job = DumpJob(run)
    problem = dump_problem(run.resource_set)
    if problem is not None:
        logger.warning("%s: dumps not built: %s", run.resource_set, problem)
        job.report.problem = problem
        _save_state(job, started, through=job.state.through_change_id)
        return job.report
    if capabilities.publish_resource_dump:
        _resource_dump(job)
    if capabilities.publish_change_dump:
        _change_dump(job)
    job.switch.apply()
    _save_state(job, started, through=job.watermark)
    return job.report


def _resource_dump(job: DumpJob) -> None:
    """Rebuild the Resource Dump's packages and write its documents, for the switch."""
    packages = ResourceDumpWriter(job).run()
    if packages is None and _written(job, DumpDocument.Kind.RESOURCE_DUMP):
        return
    rows = ResourcePackage.objects.filter(resource_set=job.resource_set)
    write_resource_dump(job, rows if packages is None else packages)


def _change_dump(job: DumpJob) -> None:
    """Rebuild the Change Dump's packages and write its documents, for the switch."""
    packages = ChangeDumpWriter(job).run()
    if packages is None and _written(job, DumpDocument.Kind.CHANGE_DUMP):
        return
    rows = ChangePackage.objects.filter(resource_set=job.resource_set)
    write_change_dump(job, rows if packages is None else packages)


def _written(job: DumpJob, kind: str) -> bool:
    documents = DumpDocument.objects.filter(resource_set=job.resource_set, kind=kind, number=0)
    return documents.exclude(storage_name="").exists()


def _save_state(job: DumpJob, started: float, *, through: int) -> None:
    state = job.state
    state.through_change_id = through
    state.built_at = timezone.now()
    state.duration = timedelta(seconds=time.monotonic() - started)
    state.packages_written = len(job.report.packages_written)
    state.bytes_written = job.report.bytes_written
    state.skipped = len(job.report.skipped)
    state.problem = job.report.problem
    state.save()
