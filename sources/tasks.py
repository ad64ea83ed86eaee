"""Celery tasks: take ids, call a service, safe to run twice."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from . import indexing

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
    """Mirror a set's new changes into Elasticsearch; retried with backoff."""
    return indexing.index_pending_changes(resource_set_id)


@shared_task
def reconcile_indices() -> str:
    """Periodic repair of the Elasticsearch mirror from the database."""
    if not indexing.elasticsearch_enabled():
        return "Elasticsearch is not configured."
    return str(indexing.reconcile())


def queue_indexing(resource_set_id: int) -> None:
    """After events were committed (sources.receivers): mirror them, never failing the request.

    Eagerly (no broker) a failure is only logged: nothing is lost, since
    `reconcile` indexes every change still marked unindexed.
    """
    if not indexing.elasticsearch_enabled():
        return
    if settings.CELERY_TASK_ALWAYS_EAGER:
        try:
            indexing.index_pending_changes(resource_set_id)
        except Exception:
            logger.exception("Indexing set %s failed; reconcile will retry", resource_set_id)
        return
    index_pending_changes.delay(resource_set_id)


@shared_task
def scan_folders() -> str:
    """Beat: rescan the folder of every set RESOURCESYNC_SCAN_SETS names (see sources.scanning)."""
    from .scanning import scan_listed_sets

    return scan_listed_sets()
