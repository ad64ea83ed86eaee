"""`harvest --follow` against the live portal: subscribe, catch up, apply notifications.

The portal publishes through its embedded hub (eager, in the live server's
and the test's threads); the follower runs in its own thread with its
callback server on loopback, and downloads from the live portal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harvester.config import load_config
from harvester.follow import run_follow
from notifications.models import Subscription

from ..conftest import REPO
from .test_harvester_portal import PublishedSet, article, tree, write_config

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def storage(settings, tmp_path: Path) -> None:
    from ..support import store_documents_in

    store_documents_in(settings, tmp_path / "documents")


@pytest.fixture
def portal(live_server, settings) -> str:
    settings.PUBLIC_BASE_URL = live_server.url
    return live_server.url


def notifying(published: PublishedSet) -> PublishedSet:
    settings = published.resource_set.capability_settings
    settings.publish_notifications = True
    settings.save()
    return published


class Following:
    """run_follow in a thread; its progress lines collected."""

    def __init__(self, config: Path) -> None:
        self.lines: list[str] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.report = None
        self.thread = threading.Thread(target=self._run, args=(config,), daemon=True)

    def _run(self, config: Path) -> None:
        try:
            self.report = run_follow(load_config(config), notify=self.lines.append, stop=self.stop)
        except BaseException as error:  # reported by the test
            self.error = error

    def __enter__(self) -> Following:
        self.thread.start()
        self.wait(lambda: sum(line.startswith("caught up") for line in self.lines) >= 2)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop.set()
        self.thread.join(30)

    def wait(self, condition, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.error is None, repr(self.error)
            assert time.monotonic() < deadline, "\n".join(self.lines)
            time.sleep(0.05)

    def notifications(self) -> int:
        return sum(line.startswith("notification") for line in self.lines)


def test_follow_keeps_the_destination_equal_to_the_source_while_events_stream_in(
    portal: str, tmp_path: Path
) -> None:
    published = notifying(PublishedSet(portal, tmp_path / "articles", "articles"))
    published.ingest([published.write(f"a{n}.txt", article(n)) for n in range(4)])
    config = write_config(tmp_path, published)
    mirror = published.mirror(tmp_path / "mirror")

    with Following(config) as following:
        assert Subscription.objects.count() == 1
        assert tree(mirror) == published.files()  # caught up before listening
        batches = [  # each writes its files only when its turn comes
            lambda: [published.write("a4.txt", article(4))],
            lambda: [published.write("a1.txt", article(1, 2), change="updated")],
            lambda: [published.delete("a2.txt"), published.write("b/new.txt", article(9))],
            lambda: [published.write("a1.txt", article(1, 3), change="updated")],
        ]
        for number, events in enumerate(batches, start=1):
            published.ingest(events())
            following.wait(lambda number=number: following.notifications() >= number)
            assert tree(mirror) == published.files()

    assert following.error is None
    assert "unsubscribed" in following.lines
    assert not Subscription.objects.exists()
    report = following.report
    assert report is not None and report.ok, report.failures
    assert (report.downloaded, report.deleted) == (4, 1)
    assert "follow: downloaded 4, deleted 1" in report.summary()


def test_follow_recovers_a_missed_notification_from_the_change_list(
    portal: str, tmp_path: Path
) -> None:
    published = notifying(PublishedSet(portal, tmp_path / "articles", "articles"))
    published.ingest([published.write("a0.txt", article(0))])
    mirror = published.mirror(tmp_path / "mirror")

    with Following(write_config(tmp_path, published)) as following:
        # The hub does not deliver this one (its subscription is failing meanwhile).
        Subscription.objects.update(state=Subscription.State.FAILING)
        published.ingest([published.write("missed.txt", article(1))])
        Subscription.objects.update(state=Subscription.State.ACTIVE)
        published.ingest([published.write("after.txt", article(2))])
        following.wait(lambda: following.notifications() >= 1)
        assert tree(mirror) == published.files()
    assert any(line.startswith("gap:") for line in following.lines)
    assert following.report is not None and following.report.ok


def test_ctrl_c_unsubscribes_and_prints_a_summary(
    portal: str, tmp_path: Path, database_url: str
) -> None:
    published = notifying(PublishedSet(portal, tmp_path / "articles", "articles"))
    published.ingest([published.write("a0.txt", article(0))])
    config = write_config(tmp_path, published)
    env = {**os.environ, "DATABASE_URL": database_url}
    process = subprocess.Popen(
        [sys.executable, "manage.py", "harvest", str(config), "--follow"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not Subscription.objects.exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(1)  # let it catch up and listen
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "subscribed to" in out
    assert "unsubscribed" in out
    assert out.strip().splitlines()[-1].startswith("follow: downloaded")
    assert not Subscription.objects.exists()


def test_follow_renews_its_lease_before_it_ends(
    portal: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harvester.follow

    monkeypatch.setattr(harvester.follow, "RENEW_AT", 0.002)  # 300 s lease: renew every 0.6 s
    published = notifying(PublishedSet(portal, tmp_path / "articles", "articles"))
    published.ingest([published.write("a0.txt", article(0))])
    with Following(write_config(tmp_path, published, lease_seconds=300)) as following:
        first = Subscription.objects.get().renewed_at
        following.wait(lambda: "lease renewed" in following.lines)
        assert Subscription.objects.get().renewed_at > first
