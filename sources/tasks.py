"""Celery tasks: take ids, call a service, safe to run twice."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from .generators import get_generator

logger = logging.getLogger(__name__)

#: A follow-up comes this long after the claim that turned its run away could have
#: lapsed (`indexing.CLAIM_SECONDS` past the holder's last renewal).
FOLLOW_UP_MARGIN_SECONDS = 15

#: Indexing tasks are retried with backoff (Elasticsearch down, a busy database).
RETRIED: dict[str, Any] = {
    "autoretry_for": (Exception,),
    "retry_backoff": 2,
    "retry_backoff_max": 300,
    "retry_jitter": True,
    "max_retries": 10,
}


@shared_task(bind=True, **RETRIED)
def index_pending_changes(self, resource_set_id: int) -> int:
    """Make a set's new changes visible to the generator; retried with backoff."""
    return get_generator().index_pending(resource_set_id)


def _follow_up_key(resource_set_id: int) -> str:
    return f"resourcesync:mirror-follow-up:{resource_set_id}"


def queue_follow_up(resource_set_id: int) -> None:
    """A run of the set was turned away by another's claim: make sure one run comes once
    that claim could have lapsed, since a holder gone with its host never looks again.

    One pending per set (during a long backlog every commit's run is turned
    away); its key lapses a countdown after the follow-up was due, so one lost
    with its worker holds off the next only that long. Eagerly (no broker)
    none: it would run at once, in the request, against the same claim; the
    embedded beat's `reconcile_indices` indexes what is left, and a claim of
    this host's dead process is taken over at once anyway.
    """
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return
    from .indexing import CLAIM_SECONDS  # sent by the mirror, so loaded; not on every start

    countdown = CLAIM_SECONDS + FOLLOW_UP_MARGIN_SECONDS
    if cache.add(_follow_up_key(resource_set_id), True, timeout=2 * countdown):
        follow_up_indexing.apply_async((resource_set_id,), countdown=countdown)


@shared_task(**RETRIED)
def follow_up_indexing(resource_set_id: int) -> int:
    """`queue_follow_up`'s run: index what is left, if anything. It lets the next
    turned-away run queue another first, as it may be turned away itself (a holder
    still at a long backlog)."""
    cache.delete(_follow_up_key(resource_set_id))
    generator = get_generator()
    if not generator.needs_indexing(resource_set_id):
        return 0
    return generator.index_pending(resource_set_id)


@shared_task
def reconcile_indices() -> str:
    """Periodic repair of the generator's copy (the Elasticsearch mirror) from the database."""
    return str(get_generator().reconcile())


def queue_indexing(resource_set_id: int) -> None:
    """After events were committed (sources.receivers): index them, never failing the request.

    Eagerly (no broker) a failure is only logged: nothing is lost, since
    `reconcile` indexes every change still marked unindexed.
    """
    generator = get_generator()
    if not generator.needs_indexing(resource_set_id):
        return
    if settings.CELERY_TASK_ALWAYS_EAGER:
        try:
            generator.index_pending(resource_set_id)
        except Exception:
            logger.exception("Indexing set %s failed; reconcile will retry", resource_set_id)
        return
    index_pending_changes.delay(resource_set_id)


@shared_task
def scan_folders() -> str:
    """Beat: rescan the folder of every set RESOURCESYNC_SCAN_SETS names (see sources.scanning)."""
    from .scanning import scan_listed_sets

    return scan_listed_sets()
