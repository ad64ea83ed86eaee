"""Regeneration tasks: by threshold after ingest, periodically, and from the admin."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from sources.generators import get_generator
from sources.models import ResourceSet
from sources.re_resolve import re_resolve_uris

from . import cleanup
from .descriptions import missing_documents
from .models import RegenerationState
from .regeneration import change_watermark, pending_changes, regenerate, rotation_due

logger = logging.getLogger(__name__)


@shared_task(
    bind=True, autoretry_for=(Exception,), retry_backoff=2, retry_backoff_max=120, max_retries=5
)
def regenerate_resource_set(self, resource_set_id: int, full: bool = False) -> str:
    """Regenerate one set; safe to run twice (a second run finds nothing dirty)."""
    resource_set = ResourceSet.objects.select_related("provider").get(pk=resource_set_id)
    RegenerationState.objects.filter(resource_set=resource_set).update(scheduled_at=None)
    report = regenerate(resource_set, full=full)
    if report is None:
        # Another run holds the set. It checks for newer changes once it has
        # let go (below), so only a full run must come back by itself.
        if full:
            regenerate_resource_set.apply_async(
                args=(resource_set_id,), kwargs={"full": True}, countdown=5
            )
        return "busy"
    # Changes arrived during the run: their own timer found the set busy, so go
    # again now if the generator can show them; changes still being indexed
    # come back through `changes_indexed` (sitemaps.receivers).
    if change_watermark(resource_set, get_generator()) > report.through_change_id:
        schedule(resource_set, delay=0)
    return str(report)


@shared_task
def regenerate_due_sets() -> int:
    """Periodic: regenerate every set with pending changes or a list due to rotate."""
    count = 0
    for resource_set in ResourceSet.objects.filter(provider__active=True).select_related(
        "provider"
    ):
        if pending_changes(resource_set) or _rotation_due(resource_set):
            regenerate_resource_set.delay(resource_set.pk)
            count += 1
    return count


def _rotation_due(resource_set: ResourceSet) -> bool:
    open_list = resource_set.change_list_pages.filter(until__isnull=True).first()
    return open_list is not None and rotation_due(resource_set, open_list, timezone.now())


def schedule(resource_set: ResourceSet, *, delay: float) -> None:
    """Queue one regeneration `delay` seconds from now unless one is already queued."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        regenerate_resource_set.apply(args=(resource_set.pk,))
        return
    state, _ = RegenerationState.objects.get_or_create(resource_set=resource_set)
    when = timezone.now() + timedelta(seconds=delay)
    claimed = RegenerationState.objects.filter(
        Q(scheduled_at__isnull=True) | Q(scheduled_at__lt=timezone.now() - timedelta(minutes=5)),
        pk=state.pk,
    ).update(scheduled_at=when)
    if claimed:
        regenerate_resource_set.apply_async(args=(resource_set.pk,), countdown=delay)


def after_ingest(resource_set_id: int) -> None:
    """After events were committed, or indexed (sitemaps.receivers): regenerate once the
    set passes its threshold.

    Changes the generator cannot show yet wait for their `changes_indexed`.
    Past N pending changes it runs now; otherwise at most one run starts per
    T seconds: now if the last one started T seconds ago, so a lone change
    shows at once, else when T seconds have passed since it started.
    """
    resource_set = ResourceSet.objects.select_related("provider").get(pk=resource_set_id)
    if get_generator().needs_indexing(resource_set_id):
        return
    pending = pending_changes(resource_set)
    if not pending:
        return
    capabilities = resource_set.capabilities
    if pending >= capabilities.regenerate_after_changes:
        schedule(resource_set, delay=0)
    else:
        schedule(resource_set, delay=_throttle(resource_set, capabilities.regenerate_after_seconds))


def _throttle(resource_set: ResourceSet, seconds: int) -> float:
    """Seconds until `seconds` have passed since the set's last run started."""
    last = (
        RegenerationState.objects.filter(resource_set=resource_set)
        .values_list("regenerated_at", flat=True)
        .first()
    )
    if last is None:
        return 0
    return max(0.0, seconds - (timezone.now() - last).total_seconds())


def write_missing_documents(resource_set_id: int, *, now: bool) -> None:
    """After-commit hook: write what a set advertises but has not got yet.

    A new set is empty, so its (empty) documents are written `now`, before
    anyone can read its Capability List; a capability turned on for a full
    set is queued. If writing now fails, the queued task retries it.
    The mirror indexes first: a new portal's first indexing creates the
    indices its generator reads (README), and a new set may come before any.
    """
    resource_set = ResourceSet.objects.select_related("provider").filter(pk=resource_set_id).first()
    if resource_set is None or not missing_documents(resource_set):
        return
    if now:
        try:
            get_generator().index_pending(resource_set.pk)
            regenerate(resource_set)
            return
        except Exception:
            logger.exception("Could not write the first documents of %s; queued", resource_set)
    schedule(resource_set, delay=0)


class SetBusy(Exception):
    """Another run holds the set: the task is retried."""


def re_resolve_and_regenerate(
    resource_set: ResourceSet, *, regenerate_anyway: bool = False
) -> str | None:
    """Resolve the set's stored URIs again; if any moved, mirror them, then rewrite every
    document (a full run). None when another run holds the set (the URIs have moved)."""
    moved = re_resolve_uris(resource_set=resource_set)
    if not (moved.changed or regenerate_anyway):
        return str(moved)
    report = mirror_and_regenerate(resource_set)
    return None if report is None else f"{moved}; {report}"


def mirror_and_regenerate(resource_set: ResourceSet) -> str | None:
    """Index the moved rows, then rewrite every document (a full run); None when another
    run holds the set."""
    # The mirror first: the Elasticsearch generator would build from the old URIs.
    get_generator().index_pending(resource_set.pk)
    report = regenerate(resource_set, full=True)
    return None if report is None else str(report)


@shared_task(
    bind=True, autoretry_for=(Exception,), retry_backoff=2, retry_backoff_max=300, max_retries=10
)
def follow_new_locations(self, resource_set_id: int) -> str:
    """A set's url_prefix or resource_root_dir changed and its URIs moved with the save
    (sitemaps.receivers): its mirror and documents follow. Safe to run twice."""
    resource_set = ResourceSet.objects.select_related("provider").filter(pk=resource_set_id).first()
    if resource_set is None:
        return "the set is gone"
    outcome = mirror_and_regenerate(resource_set)
    if outcome is None:
        raise SetBusy(f"{resource_set} is held by another run")
    return outcome


def after_locations_changed(resource_set_id: int) -> None:
    """After a set's url_prefix or resource_root_dir change committed (sitemaps.receivers),
    with its URIs already moved: the mirror and the documents follow.

    Eagerly (no broker: `make run`) it runs here, and a failure is logged with what to run.
    """
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        follow_new_locations.delay(resource_set_id)
        return
    resource_set = ResourceSet.objects.select_related("provider").get(pk=resource_set_id)
    try:
        outcome = mirror_and_regenerate(resource_set)
    except Exception:
        outcome = None
        logger.exception("Rewriting the documents of %s failed", resource_set)
    if outcome is None:
        logger.error(
            "The documents of %s do not follow its new url_prefix yet: run "
            "manage.py re_resolve %s --regenerate",
            resource_set,
            resource_set.path,
        )


@shared_task
def cleanup_documents() -> int:
    """Periodic: delete superseded versions past the grace period and files killed runs left."""
    removed = cleanup.remove_unreferenced()
    if removed:
        logger.info("Removed %d unreferenced document file(s)", len(removed))
    return len(removed)
