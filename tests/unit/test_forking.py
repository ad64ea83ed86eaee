"""Forked page builders share the parent's memory instead of copying it."""

from __future__ import annotations

import gc
import threading

from sitemaps.forking import can_fork, forked_pool


def frozen_objects() -> int:
    return gc.get_freeze_count()


def test_a_forked_builder_inherits_the_parents_objects_frozen_out_of_its_collector():
    """Else its collections touch (and so copy) every shared page: 70 MiB at 1,000,000."""
    with forked_pool(1) as pool:
        in_child = pool.submit(frozen_objects).result()
    assert in_child > 0


def test_the_parent_collects_its_objects_again_once_the_builders_are_gone():
    with forked_pool(1) as pool:
        pool.submit(frozen_objects).result()
    assert gc.get_freeze_count() == 0


def test_a_run_in_a_server_thread_builds_its_pages_in_process():
    """A fork copies other threads' locks held at that moment (SQLite's among them):
    a builder forked beside a threaded server's request threads could hang for ever."""
    answers = []
    thread = threading.Thread(target=lambda: answers.append(can_fork()))
    thread.start()
    thread.join()
    assert answers == [False]


def test_a_run_in_the_main_thread_may_fork():
    assert can_fork()
