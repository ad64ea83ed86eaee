"""The reference client, `resync-sync` (resync 2.0.1), keeps a copy of every set in sync.

It runs as a real process against the live portal (pytest-django's
`live_server`), which serves the documents and, under `/files/`, the
resources. resync reads no Change List Index, so it follows a set through
`changelist.xml` while the set has one Change List and through
`changelist-open.xml` after rotations. The commands are those the README gives.
"""

from __future__ import annotations

import configparser
import dataclasses
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.utils import timezone

from sitemaps.models import ChangeListPage
from sitemaps.protocol.reader import parse_document
from sources.models import ApiToken, CapabilitySettings, Change

from ..support import store_documents_in
from .test_harvester_portal import PublishedSet, article, tree

pytestmark = pytest.mark.django_db(transaction=True)

RESYNC_SYNC = Path(sys.executable).with_name("resync-sync")


@pytest.fixture(autouse=True)
def storage(settings, tmp_path: Path) -> None:
    store_documents_in(settings, tmp_path / "documents")


@pytest.fixture
def portal(live_server, settings) -> str:
    """The live portal's base URL, which every document's URLs now start with."""
    settings.PUBLIC_BASE_URL = live_server.url
    return live_server.url


class Client:
    """resync-sync for one set, run in its own folder (it keeps its state in the cwd)."""

    def __init__(self, published: PublishedSet, folder: Path, token: str | None = None) -> None:
        self.published = published
        self.folder = folder
        self.copy = folder / "copy"
        folder.mkdir()
        self.options = [f"--access-token={token}"] if token else []

    @property
    def mapping(self) -> str:
        return f"{self.published.resource_set.url_prefix}={self.copy}"

    def run(self, *args: str) -> str:
        """Its log, after a status line for the exit code (resync exits 0 on a fatal error)."""
        command = [str(RESYNC_SYNC), *self.options, *args, self.mapping]
        done = subprocess.run(command, cwd=self.folder, capture_output=True, text=True, timeout=120)
        return f"exit {done.returncode}\n{done.stderr}"

    def baseline(self) -> str:
        return self.run("--baseline", "--delete", "--capabilitylist", self.capability_list)

    def incremental(self, change_list: str, *since: str) -> str:
        url = self.published.document_url(change_list)
        return self.run("--incremental", "--delete", "--changelist-uri", url, *since)

    def audit(self) -> str:
        return self.run("--audit", "--capabilitylist", self.capability_list)

    @property
    def capability_list(self) -> str:
        return self.published.capability_list_url

    def sync_point(self) -> float:
        """The timestamp resync stored for its next incremental run."""
        state = configparser.ConfigParser()
        state.read(self.folder / ".resync-client-status.cfg")
        return float(next(iter(state["incremental"].values())))


def resource_list_at(published: PublishedSet, token: str | None = None) -> str:
    """The `at` of the set's Resource List: where an incremental run may safely start."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(published.document_url("resourcelist.xml"), headers=headers, timeout=10)
    at = parse_document(response.content).at
    assert at is not None
    return at.isoformat().replace("+00:00", "Z")


def assert_ok(log: str, status: str) -> None:
    assert log.startswith("exit 0\n") and "FatalError" not in log, log
    assert f"Status: {status:>15}" in log, log


def changes_after_baseline(published: PublishedSet) -> list:
    return [
        published.write("r1.txt", article(1, version=2), change="updated"),
        published.delete("r2.txt"),
        published.write("r9.txt", article(9)),
    ]


def test_baseline_incremental_and_audit_with_one_change_list(portal: str, tmp_path: Path) -> None:
    published = PublishedSet(portal, tmp_path / "source", "one")
    CapabilitySettings.objects.filter(resource_set=published.resource_set).update(
        entries_per_document=1000
    )
    published.ingest([published.write(f"r{n}.txt", article(n)) for n in range(5)])
    client = Client(published, tmp_path / "resync")

    since = resource_list_at(published)  # read before the baseline, as the README says

    assert_ok(client.baseline(), "SYNCED")

    assert tree(client.copy) == published.files()
    newest_lastmod = max(change.lastmod for change in Change.objects.all())
    assert client.sync_point() == newest_lastmod.timestamp()  # not the Resource List's `at`
    _, key = ApiToken.issue(provider=published.resource_set.provider)
    published.post(key, changes_after_baseline(published))
    assert ChangeListPage.objects.filter(resource_set=published.resource_set).count() == 1

    log = client.incremental("changelist.xml", "--from", since)

    assert_ok(log, "CHANGES APPLIED")
    assert tree(client.copy) == published.files()
    assert_ok(client.audit(), "IN SYNC")
    newest_change = Change.objects.latest("datetime").datetime
    assert client.sync_point() == pytest.approx(newest_change.timestamp(), abs=1e-6)
    # The next run starts where the last one ended, without --from.
    published.post(key, [published.write("r3.txt", article(3, version=2), change="updated")])
    assert_ok(client.incremental("changelist.xml"), "CHANGES APPLIED")
    assert tree(client.copy) == published.files()
    assert_ok(client.audit(), "IN SYNC")


def lists_to_read(published: PublishedSet, sync_point: float) -> list[str]:
    """The Change Lists a run from `sync_point` needs, oldest first, as the README says.

    Closed lists that end before it are skipped; the open one comes last, by its fixed name.
    """
    index = parse_document(httpx.get(published.document_url("changelist.xml"), timeout=10).content)
    assert index.is_index
    closed = [
        part.loc
        for part in index.entries
        if part.until is not None and part.until.timestamp() >= sync_point
    ]
    return [*closed, published.document_url("changelist-open.xml")]


def test_incremental_through_changelist_open_after_rotations(portal: str, tmp_path: Path) -> None:
    published = PublishedSet(portal, tmp_path / "source", "rotated")  # three entries a document
    for n in range(7):
        published.ingest([published.write(f"r{n}.txt", article(n))])
    lists = ChangeListPage.objects.filter(resource_set=published.resource_set)
    assert [page.entries for page in lists.all()] == [3, 3, 1]
    client = Client(published, tmp_path / "resync")
    since = resource_list_at(published)
    assert_ok(client.baseline(), "SYNCED")  # through a Resource List Index of three lists
    _, key = ApiToken.issue(provider=published.resource_set.provider)

    # Changes that fill the open list: changelist-open.xml holds all of them.
    published.post(
        key,
        [
            published.write("r1.txt", article(1, version=2), change="updated"),
            published.delete("r2.txt"),
        ],
    )
    assert [page.entries for page in lists.all()] == [3, 3, 3]
    assert_ok(client.incremental("changelist-open.xml", "--from", since), "CHANGES APPLIED")
    assert tree(client.copy) == published.files()

    # The full list closes with the next change; the client had read it to its end.
    published.post(key, [published.write("r3.txt", article(3, version=2), change="updated")])
    assert lists.count() == 4
    assert_ok(client.incremental("changelist-open.xml"), "CHANGES APPLIED")
    assert tree(client.copy) == published.files()

    # A list closes with changes the client has not read: it reads that list, then the open one.
    published.post(key, [published.write("r4.txt", article(4, version=2), change="updated")])
    published.post(key, [published.delete("r5.txt"), published.write("r9.txt", article(9))])
    assert lists.get(until__isnull=True).since.timestamp() > client.sync_point()
    urls = lists_to_read(published, client.sync_point())
    assert len(urls) == 2  # the list closed since the last run, then the open one
    for url in urls:
        assert_ok(
            client.run("--incremental", "--delete", "--changelist-uri", url), "CHANGES APPLIED"
        )

    assert tree(client.copy) == published.files()
    assert_ok(client.audit(), "IN SYNC")


def test_incremental_through_lists_split_inside_one_instant(portal: str, tmp_path: Path) -> None:
    """Seven changes dated alike fill more than a three-entry list: the lists split inside
    that instant (one's `until` is the next one's `from`), and resync, which keeps the
    changes at its sync point, applies every one of them."""
    published = PublishedSet(portal, tmp_path / "source", "instant")  # three entries a document
    published.ingest([published.write("r0.txt", article(0))])
    client = Client(published, tmp_path / "resync")
    assert_ok(client.baseline(), "SYNCED")

    events = [published.write(f"r{n}.txt", article(n)) for n in range(1, 8)]
    moment = timezone.now()  # after the files' lastmod: resync moves its sync point to both
    published.ingest([dataclasses.replace(event, datetime=moment) for event in events])
    lists = ChangeListPage.objects.filter(resource_set=published.resource_set)
    assert lists.filter(until=moment, until_key__isnull=False).count() >= 2
    for url in lists_to_read(published, client.sync_point()):
        log = client.run("--incremental", "--delete", "--changelist-uri", url)
        assert log.startswith("exit 0\n") and "FatalError" not in log, log

    assert tree(client.copy) == published.files()
    assert_ok(client.audit(), "IN SYNC")


def test_a_protected_set_syncs_with_an_access_token(portal: str, tmp_path: Path) -> None:
    published = PublishedSet(portal, tmp_path / "source", "private", protected=True)
    published.ingest([published.write(f"r{n}.txt", article(n)) for n in range(3)])
    _, key = ApiToken.issue(provider=published.resource_set.provider)
    stranger = Client(published, tmp_path / "stranger")
    assert "HTTP Error 401: Unauthorized" in stranger.baseline()
    client = Client(published, tmp_path / "resync", token=key)

    since = resource_list_at(published, key)
    assert_ok(client.baseline(), "SYNCED")
    published.post(key, changes_after_baseline(published))
    assert_ok(client.incremental("changelist-open.xml", "--from", since), "CHANGES APPLIED")

    assert tree(client.copy) == published.files()
    assert_ok(client.audit(), "IN SYNC")


def test_the_limits_the_readme_names(portal: str, tmp_path: Path) -> None:
    """resync reads no Change List Index, its --hash breaks incremental runs, and it
    refuses to baseline an empty set (whose empty documents it reads)."""
    published = PublishedSet(portal, tmp_path / "source", "limits")
    empty = Client(published, tmp_path / "empty")
    refused = empty.baseline()
    published.ingest([published.write(f"r{n}.txt", article(n)) for n in range(4)])  # two lists
    client = Client(published, tmp_path / "resync")
    since = resource_list_at(published)
    hashed_baseline = client.run(
        "--baseline", "--hash", "md5", "--capabilitylist", client.capability_list
    )

    index = client.incremental("changelist.xml", "--from", since)
    hashed = client.run(
        "--incremental",
        "--hash",
        "md5",
        "--changelist-uri",
        published.document_url("changelist-open.xml"),
        "--from",
        since,
    )

    assert "FatalError: Aborting as there are no resources to sync" in refused, refused
    assert_ok(hashed_baseline, "SYNCED")
    assert "FatalError: Can't read source change list" in index, index
    assert "ChangeTypeError: got None" in index, index
    assert "AttributeError: 'ChangeList' object has no attribute 'hashes'" in hashed, hashed
