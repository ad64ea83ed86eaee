"""A thread pool that never queues more work than it can soon start.

`ThreadPoolExecutor.map` submits every item at once, which for a million-entry
Resource List means a million futures in memory; this keeps a few per worker.
Items go to the workers in small batches: handing one small file from thread
to thread costs about as much CPU as writing it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sized
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import islice
from queue import SimpleQueue
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Batches kept in flight per worker: enough to keep every thread busy.
IN_FLIGHT_PER_WORKER = 4
#: The largest batch; smaller when there are few items, so that every worker gets some.
MAX_BATCH = 32


def map_bounded(workers: int, items: Iterable[T], work: Callable[[T], R]) -> Iterator[tuple[T, R]]:
    """Yield `(item, work(item))` as each batch finishes, in completion order."""
    size = batch_size(workers, len(items)) if isinstance(items, Sized) else 1

    def run(batch: list[T]) -> list[tuple[T, R]]:
        return [(item, work(item)) for item in batch]

    for results in _map_batches(workers, _batches(items, size), run):
        yield from results


def batch_size(workers: int, count: int) -> int:
    """Items per batch: up to MAX_BATCH, while each worker still gets several batches."""
    return max(1, min(MAX_BATCH, count // (workers * IN_FLIGHT_PER_WORKER)))


def _batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def _map_batches(
    workers: int, batches: Iterator[list[T]], run: Callable[[list[T]], R]
) -> Iterator[R]:
    limit = workers * IN_FLIGHT_PER_WORKER
    # Finished futures queue themselves: one wake-up per result, where
    # `concurrent.futures.wait` would lock every pending future each time.
    finished: SimpleQueue[Future[R]] = SimpleQueue()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending = 0
        for batch in batches:
            pool.submit(run, batch).add_done_callback(finished.put)
            pending += 1
            if pending >= limit:
                pending -= 1
                yield finished.get().result()
        while pending:
            pending -= 1
            yield finished.get().result()
