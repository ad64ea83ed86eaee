"""A thread pool that never queues more work than it can soon start.

`ThreadPoolExecutor.map` submits every item at once, which for a million-entry
Resource List means a million futures in memory; this keeps a few per worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from queue import SimpleQueue
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Items kept in flight per worker: enough to keep every thread busy.
IN_FLIGHT_PER_WORKER = 4


def map_bounded(workers: int, items: Iterable[T], work: Callable[[T], R]) -> Iterator[tuple[T, R]]:
    """Yield `(item, work(item))` as each finishes, in completion order."""
    limit = workers * IN_FLIGHT_PER_WORKER
    # Finished futures queue themselves: one wake-up per result, where
    # `concurrent.futures.wait` would lock every pending future each time.
    finished: SimpleQueue[Future[R]] = SimpleQueue()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: dict[Future[R], T] = {}
        for item in items:
            future = pool.submit(work, item)
            pending[future] = item
            future.add_done_callback(finished.put)
            if len(pending) >= limit:
                future = finished.get()
                yield pending.pop(future), future.result()
        while pending:
            future = finished.get()
            yield pending.pop(future), future.result()
