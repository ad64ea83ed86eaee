"""One Mirror serves every thread of a process (gunicorn's gthread workers, eager tasks)."""

from __future__ import annotations

import os
import threading
from typing import Any

from sources.indexing import Mirror

REFUSED = {"errors": True, "items": [{"index": {"status": 400, "error": "mapper_parsing"}}]}


class FakeClient:
    """Refuses bodies naming "bad"; accepts the rest."""

    def bulk(self, *, body: bytes, **_: Any) -> dict[str, Any]:
        return REFUSED if b"bad" in body else {"errors": False, "items": []}


def test_each_thread_waits_for_and_answers_for_its_own_request():
    """A batch sent in the background by one request thread is not taken over by another:
    its refusal is raised where it was sent, not in whichever thread sends next."""
    mirror = Mirror(hosts=["http://127.0.0.1:9"], index_prefix="t", timeout=1, options={})
    mirror._clients["json"] = (os.getpid(), FakeClient())
    sent, first_done = threading.Event(), threading.Event()
    outcomes: dict[str, BaseException | None] = {}

    def first() -> None:
        mirror.send([({"index": {"_index": "t", "_id": "bad"}}, {"k": 1})], wait=False)
        sent.set()
        first_done.wait(10)
        try:
            mirror.flush()
            outcomes["first"] = None
        except RuntimeError as error:
            outcomes["first"] = error

    thread = threading.Thread(target=first)
    thread.start()
    assert sent.wait(10)
    try:
        mirror.send([({"index": {"_index": "t", "_id": "good"}}, {"k": 2})])
        outcomes["second"] = None
    except RuntimeError as error:
        outcomes["second"] = error
    first_done.set()
    thread.join(10)

    assert outcomes["second"] is None
    assert "mapper_parsing" in str(outcomes["first"])
