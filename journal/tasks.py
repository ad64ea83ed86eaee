"""Periodic: keep the journal to its retention period."""

from __future__ import annotations

import logging

from celery import shared_task

from .recording import prune_runs

logger = logging.getLogger(__name__)


@shared_task
def prune_journal() -> int:
    """Delete runs older than RESOURCESYNC_JOURNAL_RETENTION_DAYS; safe to run twice."""
    deleted = prune_runs()
    if deleted:
        logger.info("Pruned %d run(s) from the journal", deleted)
    return deleted
