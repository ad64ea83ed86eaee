"""What `/healthz` checks: each part the portal needs, with a short timeout.

A check returns nothing when its part works and raises when it does not;
`run_checks` turns that into a report. Parts that are not configured (no
Elasticsearch, eager Celery) are reported as such and never fail. Details of
a failure go to the log, not to the (public) response.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import connection

from sitemaps.storage import document_storage
from sources.generators import get_generator
from sources.models import ResourceSet

logger = logging.getLogger(__name__)

#: Seconds each network check may take, so a probe answers within a few seconds.
TIMEOUT = 1.5
OK, FAIL, NOT_CONFIGURED = "ok", "fail", "not configured"


class HealthCheckFailed(Exception):
    """A part answered, but not as a working one."""


def check_database() -> None:
    """The database answers and is migrated."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    ResourceSet.objects.exists()


def check_storage() -> None:
    """The document storage takes a write (a full or read-only disk fails here)."""
    storage = document_storage()
    name = storage.save(f".healthz-{uuid.uuid4().hex}", ContentFile(b"ok"))
    storage.delete(name)


def check_elasticsearch() -> bool:
    """The copy the generator keeps (the Elasticsearch mirror) answers; False if it keeps none."""
    return get_generator().check_copy(TIMEOUT)


def redis_configured() -> bool:
    return settings.CELERY_BROKER_URL.startswith(("redis://", "rediss://"))


def check_redis() -> None:
    """The Celery broker's Redis answers a PING."""
    import redis

    with redis.Redis.from_url(
        settings.CELERY_BROKER_URL, socket_connect_timeout=TIMEOUT, socket_timeout=TIMEOUT
    ) as server:
        server.ping()


def worker_configured() -> bool:
    return bool(settings.CELERY_BROKER_URL) and not settings.CELERY_TASK_ALWAYS_EAGER


def check_celery_worker() -> None:
    """At least one worker answers a ping through the broker."""
    from .celery import app

    with app.connection_for_write() as broker:
        # One attempt: kombu otherwise retries for a long time.
        broker.ensure_connection(max_retries=0, timeout=TIMEOUT)
        replies = app.control.ping(timeout=TIMEOUT, limit=1, connection=broker)
    if not replies:
        raise HealthCheckFailed("no worker answered a ping")


@dataclass(frozen=True)
class Check:
    name: str
    #: Raises when the part fails; returns False when there is nothing to check.
    run: Callable[[], bool | None]
    configured: Callable[[], bool] = lambda: True


CHECKS = (
    Check("database", check_database),
    Check("storage", check_storage),
    Check("elasticsearch", check_elasticsearch),
    Check("redis", check_redis, redis_configured),
    Check("celery_worker", check_celery_worker, worker_configured),
)


def run_check(check: Check) -> dict[str, object]:
    """One part's result: its status, how long it took, and why it failed."""
    if not check.configured():
        return {"status": NOT_CONFIGURED}
    started = time.perf_counter()
    try:
        checked = check.run()
    except Exception as error:
        logger.warning("Health check %s failed: %r", check.name, error, exc_info=True)
        result: dict[str, object] = {"status": FAIL, "error": type(error).__name__}
    else:
        if checked is False:
            return {"status": NOT_CONFIGURED}
        result = {"status": OK}
    result["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return result


def run_checks() -> dict[str, object]:
    """The whole report; `failing` names every part that failed."""
    results = {check.name: run_check(check) for check in CHECKS}
    failing = [name for name, result in results.items() if result["status"] == FAIL]
    return {"status": FAIL if failing else OK, "failing": failing, "checks": results}
