"""Start resync-simulator 1.1.0 (a live ResourceSync source that keeps changing) for tests.

Run as a script: ``python tests/integration/resync_simulator.py --port P --resources N
--events E --delay S --seed X``. It serves `/capabilitylist.xml`, a Resource List and a
Change List on 127.0.0.1:P, makes E random creates, updates and deletes S seconds apart,
then keeps serving.

Two patches are applied here, at run time, never to the installed package:

- Python 3.11 compatibility: the simulator calls `random.sample(dict.keys(), n)`, which
  3.11 refuses ("Population must be a sequence"); its module gets a seeded `Random`
  whose `sample` takes any collection (seeded, so a run's sequence of events repeats).
- Consistent snapshots: the simulator changes its resources in the main thread while
  Tornado's thread builds documents from them, unguarded, and stamps a Resource List's
  `at` only after building it. One lock around each change and each Resource List
  (stamp included) makes every document a true snapshot, as a real source's are, so a
  test never flakes on a list that is neither the state before a change nor after it.
"""

from __future__ import annotations

import argparse
import logging
import random
import threading
from collections.abc import Callable, Collection
from typing import Any

import simulator.source
from simulator.changememory import DynamicChangeList
from simulator.http import HTTPInterface, ResourceListHandler
from simulator.source import DynamicResourceListBuilder, Source

LOCK = threading.RLock()


class SequenceRandom(random.Random):
    """`random.Random` whose `sample` accepts dict views and sets, as before Python 3.11."""

    def sample(self, population: Collection[Any], k: int, *, counts: Any = None) -> list[Any]:
        return super().sample(list(population), k, counts=counts)


def locked(method: Callable[..., Any]) -> Callable[..., Any]:
    """The method, run under the simulator-wide lock."""

    def run(*args: Any, **kwargs: Any) -> Any:
        with LOCK:
            return method(*args, **kwargs)

    return run


def patch(seed: int) -> None:
    """Apply both patches (see the module docstring)."""
    simulator.source.random = SequenceRandom(seed)  # type: ignore[assignment]
    for name in ("_create_resource", "_update_resource", "_delete_resource"):
        setattr(Source, name, locked(getattr(Source, name)))
    handler = ResourceListHandler
    handler.generate_resource_list = locked(handler.generate_resource_list)  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--resources", type=int, default=100)
    parser.add_argument("--events", type=int, default=100, help="stop changing after these")
    parser.add_argument("--delay", type=float, default=0.05, help="seconds between changes")
    parser.add_argument("--payload", type=int, default=1000, help="average resource size")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    patch(args.seed)
    settings = {
        "number_of_resources": args.resources,
        "change_delay": args.delay,
        "event_types": ["create", "update", "delete"],
        "average_payload": args.payload,
        "max_events": args.events,
        "stats_interval": 10,
    }
    source = Source(settings, f"http://127.0.0.1:{args.port}", args.port)
    source.add_resource_list_builder(
        DynamicResourceListBuilder(
            source, {"class": "DynamicResourceListBuilder", "uri_path": "resourcelist.xml"}
        )
    )
    source.add_changememory(
        DynamicChangeList(
            source,
            {"class": "DynamicChangeList", "uri_path": "changelist.xml", "max_changes": None},
        )
    )
    source.bootstrap()
    HTTPInterface(source).start()
    source.simulate_changes()  # returns after --events; the HTTP thread keeps serving


if __name__ == "__main__":
    main()
