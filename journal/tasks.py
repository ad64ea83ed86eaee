"""Periodic: keep the journal to its retention period, and honest about killed runs."""

from __future__ import annotations

import logging

from celery import shared_task

from .liveness import close_abandoned_runs
from .recording import prune_runs

logger = logging.getLogger(__name__)


@shared_task
def prune_journal() -> int:
    """Delete runs older than RESOURCESYNC_JOURNAL_RETENTION_DAYS; safe to run twice.

    Runs whose process is gone are marked failed first (those on the worker's own
    host at once, the others once silent for RESOURCESYNC_JOURNAL_SILENCE_SECONDS).
    """
    close_abandoned_runs()
    deleted = prune_runs()
    if deleted:
        logger.info("Pruned %d run(s) from the journal", deleted)
    return deleted
