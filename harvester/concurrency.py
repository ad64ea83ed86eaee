"""A thread pool that never queues more work than it can soon start.

`ThreadPoolExecutor.map` submits every item at once, which for a million-entry
Resource List means a million futures in memory; this keeps a few per worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Items kept in flight per worker: enough to keep every thread busy.
IN_FLIGHT_PER_WORKER = 4


def map_bounded(workers: int, items: Iterable[T], work: Callable[[T], R]) -> Iterator[tuple[T, R]]:
    """Yield `(item, work(item))` as each finishes, in completion order."""
    limit = workers * IN_FLIGHT_PER_WORKER
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: dict[Future[R], T] = {}
        for item in items:
            pending[pool.submit(work, item)] = item
            if len(pending) >= limit:
                yield from _first_completed(pending)
        while pending:
            yield from _first_completed(pending)


def _first_completed(pending: dict[Future[R], T]) -> Iterator[tuple[T, R]]:
    done, _ = wait(pending, return_when=FIRST_COMPLETED)
    for future in done:
        yield pending.pop(future), future.result()
