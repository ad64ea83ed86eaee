"""The lease a regeneration holds on its set, kept alive by a heartbeat.

One run at a time may write a set's documents. A run that is killed (kill -9,
OOM, a worker timeout) cannot let go, so the lease is only as good as its
last heartbeat: once none came for `RESOURCESYNC_REGENERATION_LEASE_SECONDS`
the run is presumed dead and the next one takes the set over.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connection, connections, transaction
from django.db.models import F, Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from resourcesync_portal import processes
from sources.models import ResourceSet

from .models import RegenerationState

logger = logging.getLogger(__name__)


class LeaseLost(RuntimeError):
    """Another run took the set over: this one stopped beating for too long."""


def lease_window() -> timedelta:
    """How long a lease lives without a heartbeat."""
    return timedelta(seconds=settings.RESOURCESYNC_REGENERATION_LEASE_SECONDS)


def holder_name() -> str:
    """Who runs: host and pid for people, a random tail so each run is unique."""
    return f"{processes.this_host()} pid {os.getpid()} #{uuid.uuid4().hex[:8]}"


#: `holder_name()` read back.
_HOLDER = re.compile(r"(?P<host>.+) pid (?P<pid>\d+) #[0-9a-f]+")


@dataclass
class Lease:
    """A set's regeneration lease held by this run."""

    state_pk: int
    holder: str

    def _mine(self):
        return RegenerationState.objects.filter(pk=self.state_pk, holder=self.holder)

    def beat(self, **fields: object) -> None:
        """Record that the run is alive (with any progress fields); raise if taken over."""
        if not self._mine().update(heartbeat_at=timezone.now(), **fields):
            raise LeaseLost(f"regeneration lease of {self.holder} was taken over")

    @contextmanager
    def holding(self) -> Iterator[None]:
        """A transaction in which the set is still this run's, and stays so.

        The beat locks the state row (a write), so no run takes the set over until
        the block commits; a run that lost the set raises LeaseLost before it writes.
        A run stalled past its lease would otherwise publish the document it was
        building over the newer run's.
        """
        with transaction.atomic():
            _end_if_paused()
            self.beat()
            yield

    def release(self, **fields: object) -> bool:
        """Let the set go, recording `fields`; False if it had been taken over."""
        done = self._mine().update(running_since=None, heartbeat_at=None, holder="", **fields)
        return bool(done)


@contextmanager
def state_locked(resource_set: ResourceSet) -> Iterator[None]:
    """A transaction holding the set's state row, which every write of a run holds too
    (`Lease.holding`): no document of the set changes until it commits."""
    with transaction.atomic():
        # A write, not SELECT FOR UPDATE: it takes SQLite's write lock as well.
        RegenerationState.objects.filter(resource_set=resource_set).update(holder=F("holder"))
        yield


def _end_if_paused() -> None:
    """On PostgreSQL, a run paused inside `holding` (a stopped VM) has its session ended
    after the lease window, which lets go of the row lock: else every task touching the
    row (scheduling any set's runs, taking this one over) would wait until it woke."""
    if connection.vendor == "postgresql":
        milliseconds = int(lease_window().total_seconds() * 1000)
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL idle_in_transaction_session_timeout = {milliseconds}")


def acquire(resource_set: ResourceSet, now: datetime) -> Lease | None:
    """Take the set's lease unless a live run holds it."""
    state, _ = RegenerationState.objects.get_or_create(resource_set=resource_set)
    lease = Lease(state_pk=state.pk, holder=holder_name())
    last_sign_of_life = Coalesce("heartbeat_at", "running_since")
    free = (
        RegenerationState.objects.filter(pk=state.pk)
        .alias(alive_at=last_sign_of_life)
        .filter(Q(running_since__isnull=True) | Q(alive_at__lt=now - lease_window()))
    )
    if _take(free, lease, now) or _take(_held_by_gone_process(state.pk), lease, now):
        return lease
    return None


def _take(rows: QuerySet[RegenerationState], lease: Lease, now: datetime) -> int:
    return rows.update(
        running_since=now, heartbeat_at=now, holder=lease.holder, progress_done=0, progress_total=0
    )


def _held_by_gone_process(state_pk: int) -> QuerySet[RegenerationState]:
    """The state row while its holder is a process of this host that is gone (killed
    mid-run, it could not let go): taken over at once, not after the lease window."""
    rows = RegenerationState.objects.filter(pk=state_pk)
    holder = rows.values_list("holder", flat=True).first() or ""
    named = _HOLDER.fullmatch(holder)
    if named is None or not processes.is_gone(named["host"], named["pid"]):
        return rows.none()
    return rows.filter(holder=holder)


def can_beat_in_thread() -> bool:
    """Whether a second connection may write beside this one.

    Not inside a transaction (tests), and not on in-memory SQLite, whose shared
    cache fails a writer at once instead of waiting.
    """
    if connection.in_atomic_block:
        return False
    return not (connection.vendor == "sqlite" and connection.is_in_memory_db())  # type: ignore[attr-defined]


class Heartbeat:
    """Beats from a thread, so one long step (a big page, a long scan) is not taken for death.

    Each beat opens and closes its own connection: a forked page builder must
    not inherit one. `paused()` keeps it quiet while the run forks.
    """

    def __init__(self, lease: Lease, interval: float) -> None:
        self.lease = lease
        self.interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="regeneration-heartbeat")
        self._thread.daemon = True

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    @contextmanager
    def paused(self) -> Iterator[None]:
        with self._lock:
            yield

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                try:
                    self.lease.beat()
                except LeaseLost:
                    logger.error("%s: lease taken over; the run stops at its next step", self)
                    return
                except DatabaseError as error:  # e.g. SQLite busy: the next beat may pass
                    logger.warning("Regeneration heartbeat failed: %s", error)
                finally:
                    connections.close_all()


@contextmanager
def heartbeat(lease: Lease) -> Iterator[Heartbeat | None]:
    """A heartbeat thread for the run when its database allows one, else None."""
    if not can_beat_in_thread():
        yield None
        return
    interval = max(lease_window().total_seconds() / 6, 0.1)
    with Heartbeat(lease, interval) as beating:
        yield beating
