"""Celery tasks: take ids, call a service, safe to run twice."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from .generators import get_generator

logger = logging.getLogger(__name__)


@shared_task(
    bind=True,
    autoretry_for=(Exception,),
    retry_backoff=2,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=10,
)
def index_pending_changes(self, resource_set_id: int) -> int:
    """Make a set's new changes visible to the generator; retried with backoff."""
    return get_generator().index_pending(resource_set_id)


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
