"""What ingestion tells the rest of the portal, so each app subscribes in its own `receivers.py`.

`events_ingested` is sent once the request's transaction has committed, with
`resource_set_id` and the set's new changes: those with
`after_change_id < id <= last_change_id`. Receivers must not fail the
request (they run after the acknowledgement); one that raises is logged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.dispatch import Signal

events_ingested = Signal()

#: Sent by a generator that keeps a copy (the Elasticsearch mirror) once a set's
#: changes are visible in it, with `resource_set_id`: regeneration waits for this
#: rather than guessing how long indexing takes.
changes_indexed = Signal()

#: Sent by `reconcile` for each set whose copy it had to repair (a node restored from
#: an older snapshot, say), with `resource_set_id`: documents built from the copy
#: meanwhile may lack what it lacked, so they are rewritten.
copy_repaired = Signal()

#: Sent by a generator that keeps a copy when a set's indexing run finds another run
#: holding the set, with `resource_set_id`: the holder may be a worker gone with its
#: host, whose claim only lapses, so a run must come after it (sources.tasks).
indexing_turned_away = Signal()


@contextmanager
def receivers_muted(signal: Signal) -> Iterator[None]:
    """Disconnect every receiver of `signal` for a while (tests and benchmarks that
    run indexing or regeneration themselves), then connect them again."""
    with signal.lock:
        saved, signal.receivers = signal.receivers, []
        signal.sender_receivers_cache.clear()
    try:
        yield
    finally:
        with signal.lock:
            signal.receivers = saved
            signal.sender_receivers_cache.clear()
