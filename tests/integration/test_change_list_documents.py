"""`changelist.xml` follows the Resource List's rule, and `changelist-open.xml` is the open list.

A client that reads no Change List Index (resync 2.0.1) must be able to sync
from `changelist.xml` while a set has one list, and from `changelist-open.xml`
always.
"""

from __future__ import annotations

import gzip
from datetime import timedelta

import pytest
from django.test import Client
from lxml import etree

from sitemaps.models import ChangeListPage
from sources.models import ApiToken

from ..support import NS, assert_valid, created, make_set, store_documents_in

BASE = "/resourcesync/acme/articles"
HOST = "http://127.0.0.1:8000"
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def body(client: Client, path: str, **headers) -> bytes:
    response = client.get(path, headers=headers)
    assert response.status_code == 200, (path, response.status_code)
    return b"".join(response.streaming_content) if response.streaming else response.content


def root_links(content: bytes) -> dict[str, str]:
    return {ln.get("rel"): ln.get("href") for ln in etree.fromstring(content).findall("rs:ln", NS)}


def rotate_after(resource_set, rotation: timedelta) -> None:
    """Set how long the set's open Change List stays open."""
    settings_row = resource_set.capability_settings
    settings_row.changelist_rotation = rotation
    settings_row.save()


def changes(content: bytes) -> list[str]:
    return etree.fromstring(content).xpath("//sm:url/sm:loc/text()", namespaces=NS)


def test_a_set_with_one_change_list_serves_it_as_changelist_xml(client):
    resource_set = make_set()
    created(resource_set, 3)

    top = body(client, f"{BASE}/changelist.xml")

    root = assert_valid(top)
    assert root.tag == f"{{{NS['sm']}}}urlset"
    assert root.find("rs:md", NS).get("capability") == "changelist"
    assert "until" not in root.find("rs:md", NS).attrib
    assert len(changes(top)) == 3
    # No index exists, so neither document links to one.
    assert root_links(top) == {"up": f"{HOST}{BASE}/capabilitylist.xml"}
    assert body(client, f"{BASE}/changelist-1.xml") == top


def test_a_second_list_makes_changelist_xml_an_index_its_parts_link_to(client):
    resource_set = make_set(entries_per_document=3)
    created(resource_set, 2)
    assert etree.fromstring(body(client, f"{BASE}/changelist.xml")).tag.endswith("urlset")

    created(resource_set, 2, start=10)  # the first list is full: closed, and a second opens

    index = assert_valid(body(client, f"{BASE}/changelist.xml"))
    assert index.tag == f"{{{NS['sm']}}}sitemapindex"
    parts = index.xpath("sm:sitemap/sm:loc/text()", namespaces=NS)
    assert parts == [f"{HOST}{BASE}/changelist-1.xml", f"{HOST}{BASE}/changelist-2.xml"]
    for part in parts:
        content = body(client, part.removeprefix(HOST))
        assert_valid(content)
        assert root_links(content)["index"] == f"{HOST}{BASE}/changelist.xml"
    first = ChangeListPage.objects.get(number=1)
    assert first.final
    closed_version = first.etag

    created(resource_set, 1, start=20)

    first.refresh_from_db()
    assert first.etag == closed_version  # a closed list is never written again


def test_changelist_open_answers_with_the_open_list_before_and_after_rotations(client):
    resource_set = make_set(entries_per_document=3)
    created(resource_set, 1)
    assert body(client, f"{BASE}/changelist-open.xml") == body(client, f"{BASE}/changelist-1.xml")

    created(resource_set, 7, start=10)  # 8 changes at 3 a list: two closed lists, one open

    open_list = ChangeListPage.objects.get(until__isnull=True)
    assert open_list.number == 3
    response = client.get(f"{BASE}/changelist-open.xml")
    content = b"".join(response.streaming_content)
    assert content == body(client, f"{BASE}/changelist-3.xml")
    assert response["Content-Type"] == "application/xml"
    root = assert_valid(content)
    assert root.tag == f"{{{NS['sm']}}}urlset"
    assert "until" not in root.find("rs:md", NS).attrib
    # The same document to caches and conditional requests as the numbered URL.
    etag = response["ETag"]
    assert client.get(f"{BASE}/changelist-3.xml")["ETag"] == etag
    assert client.get(
        f"{BASE}/changelist-open.xml", headers={"if-none-match": etag}
    ).status_code == (304)
    zipped = client.get(f"{BASE}/changelist-open.xml", headers={"accept-encoding": "gzip"})
    assert gzip.decompress(b"".join(zipped.streaming_content)) == content
    assert client.head(f"{BASE}/changelist-open.xml").status_code == 200


@pytest.mark.parametrize(
    ("entries_per_document", "rotation", "new", "listed"),
    [
        (3, timedelta(days=1), 2, ["r/0000000", "r/0000001"]),  # full: closed, then written
        (3, timedelta(days=1), 8, ["r/0000000", "r/0000001"]),  # a backlog: three lists close
        (50_000, timedelta(0), 2, ["r/0000000", "r/0000001", "r/0000010", "r/0000011"]),
    ],
    ids=["full", "backlog", "rotated"],
)
def test_changelist_open_answers_while_a_run_closes_the_open_list(
    client, monkeypatch, entries_per_document, rotation, new, listed
):
    """A run that closes the open list opens the next one before it writes it. Meanwhile
    changelist-open.xml found that new list, with no version yet, and answered 404 (a
    reader polling it under load met one every few closes). It answers with the newest
    list written until the new one is, and caches revalidate it as ever."""
    from sitemaps.regeneration import RegenerationRun

    resource_set = make_set(entries_per_document=entries_per_document)
    created(resource_set, 2)
    rotate_after(resource_set, rotation)
    close = RegenerationRun.close
    during = []

    def close_then_read(self, page, until, until_key=None):
        opened = close(self, page, until, until_key)
        during.append(
            client.get(f"{BASE}/changelist-open.xml", headers={"accept-encoding": "gzip"})
        )
        return opened

    monkeypatch.setattr(RegenerationRun, "close", close_then_read)
    created(resource_set, new, start=10)

    assert during and {response.status_code for response in during} == {200}
    read = [gzip.decompress(b"".join(response.streaming_content)) for response in during]
    for content in read:
        assert_valid(content)
    assert changes(read[0]) == [f"http://data.example.org/{name}" for name in listed]
    assert {response["Cache-Control"] for response in during} == {"public, no-cache"}
    newest = ChangeListPage.objects.get(until__isnull=True).number
    assert body(client, f"{BASE}/changelist-open.xml") == body(
        client, f"{BASE}/changelist-{newest}.xml"
    )


def test_changelist_open_of_a_protected_set_needs_a_token_that_reaches_it(client):
    resource_set = make_set(protected=True)
    other = make_set("other", "open")
    created(resource_set, 2)
    _, own = ApiToken.issue(provider=resource_set.provider)
    _, foreign = ApiToken.issue(provider=other.provider)
    path = f"{BASE}/changelist-open.xml"

    assert client.get(path).status_code == 401
    assert client.get(path, headers={"authorization": "Bearer nope"}).status_code == 401
    assert client.get(path, headers={"authorization": f"Bearer {foreign}"}).status_code == 403
    content = body(client, path, authorization=f"Bearer {own}")
    assert len(changes(content)) == 2


def test_changelist_open_is_404_where_there_is_no_such_list(client):
    resource_set = make_set(publish_change_list=False)
    created(resource_set, 1)
    make_set("acme", "fresh")  # never regenerated: no list at all

    assert client.get(f"{BASE}/changelist-open.xml").status_code == 404
    assert client.get("/resourcesync/acme/missing/changelist-open.xml").status_code == 404
    assert client.get("/resourcesync/acme/fresh/changelist-open.xml").status_code == 404
    assert client.post(f"{BASE}/changelist-open.xml").status_code == 405


def test_a_rotation_by_time_still_gives_the_closed_first_list_its_index_link(client, settings):
    resource_set = make_set()
    created(resource_set, 2)
    assert "index" not in root_links(body(client, f"{BASE}/changelist-1.xml"))
    rotate_after(resource_set, timedelta(seconds=0))  # every run closes the open list

    created(resource_set, 1, start=5)

    first = ChangeListPage.objects.get(number=1)
    assert first.until is not None and first.final
    closed = body(client, f"{BASE}/changelist-1.xml")
    assert root_links(closed)["index"] == f"{HOST}{BASE}/changelist.xml"
    assert len(changes(closed)) == 3  # closed at the run's time, after the third change
    assert etree.fromstring(body(client, f"{BASE}/changelist.xml")).tag.endswith("sitemapindex")


def every_listed_change(client: Client) -> list[str]:
    """The `<loc>` of every entry of every Change List the index names, in order."""
    index = etree.fromstring(body(client, f"{BASE}/changelist.xml"))
    parts = index.xpath("//sm:sitemap/sm:loc/text()", namespaces=NS)
    return [loc for part in parts for loc in changes(body(client, part.removeprefix(HOST)))]


@pytest.mark.parametrize("in_flight", [2, 9])
def test_changes_committed_while_a_rotation_closes_the_list_are_all_listed(
    backend, client, monkeypatch, in_flight
):
    """A rotation wrote the open list, then closed it at the run's start. Changes dated
    before that instant but committed meanwhile (a large request in flight, which the
    close waits for) were read into the closed list past its limit, and every change past
    the limit was in no Change List at all."""

    from sitemaps.regeneration import RegenerationRun
    from sources.services import ingest_events
    from sources.signals import events_ingested, receivers_muted

    from ..support import event

    resource_set = make_set(entries_per_document=5)
    created(resource_set, 3)
    rotate_after(resource_set, timedelta(seconds=0))  # every run closes the open list
    close = RegenerationRun.close

    def commit_in_flight_first(self, page, until, until_key=None):
        monkeypatch.setattr(RegenerationRun, "close", close)
        sent = [
            event("created", f"late/{n}", datetime=self.now - timedelta(microseconds=in_flight - n))
            for n in range(in_flight)
        ]
        with receivers_muted(events_ingested):
            ingest_events(resource_set=resource_set, events=sent)
        return close(self, page, until, until_key)

    monkeypatch.setattr(RegenerationRun, "close", commit_in_flight_first)
    created(resource_set, 1, start=5)  # its run finds the rotation due
    created(resource_set, 1, start=6)  # and the next run writes what came meanwhile

    listed = every_listed_change(client)
    assert sorted(listed) == sorted(
        f"http://data.example.org/{name}"
        for name in [
            *(f"r/{n:07d}" for n in (0, 1, 2, 5, 6)),
            *(f"late/{n}" for n in range(in_flight)),
        ]
    )
    assert (
        max(
            len(changes(body(client, f"{BASE}/changelist-{p.number}.xml")))
            for p in ChangeListPage.objects.all()
        )
        <= 5
    )


def test_a_closed_list_that_outgrows_its_limit_later_loses_no_change(client):
    """A closed list not yet final (the mirror still indexing changes dated inside it)
    whose successor lists changes already: the changes that turn up later past its limit
    are written into it whole, since no other list can take them."""
    from sitemaps.regeneration import regenerate
    from sources.models import Change
    from sources.signals import events_ingested, receivers_muted

    resource_set = make_set(entries_per_document=5)
    created(resource_set, 4)
    rotate_after(resource_set, timedelta(seconds=0))  # every run closes the open list
    created(resource_set, 1, start=10)  # closes the first list
    rotate_after(resource_set, timedelta(days=1))
    created(resource_set, 1, start=15)  # listed by the second
    first = ChangeListPage.objects.get(number=1)
    ChangeListPage.objects.filter(pk=first.pk).update(final=False)
    with receivers_muted(events_ingested):
        created(resource_set, 3, start=20)
    # As if indexed only now: changes dated inside the first list's window.
    late = Change.objects.order_by("-pk")[:3].values_list("pk", flat=True)
    Change.objects.filter(pk__in=list(late)).update(datetime=first.until)

    regenerate(resource_set)

    listed = every_listed_change(client)
    assert len(listed) == len(set(listed)) == 9
    assert ChangeListPage.objects.get(number=1).entries == 8


def test_a_closed_list_cut_short_while_its_successor_lists_nothing_moves_that_successor(
    client,
):
    """A closed list not yet final outgrew a lowered limit in a run with no new change:
    it ended earlier and its published, empty successor started there, but the successor
    was not written again, so the changes past the cut were in no list."""
    from sitemaps.regeneration import regenerate
    from sources.models import CapabilitySettings

    resource_set = make_set(entries_per_document=5)
    created(resource_set, 4)
    rotate_after(resource_set, timedelta(seconds=0))
    created(resource_set, 1, start=10)  # closes the first list; the second, empty, is published
    rotate_after(resource_set, timedelta(days=1))
    ChangeListPage.objects.filter(number=1).update(final=False)  # a change still awaited
    CapabilitySettings.objects.filter(resource_set=resource_set).update(entries_per_document=3)
    resource_set.refresh_from_db()

    regenerate(resource_set)

    listed = every_listed_change(client)
    assert len(listed) == len(set(listed)) == 5


def test_a_rotation_after_the_open_list_split_on_later_changes_keeps_the_set_publishing(
    client, monkeypatch
):
    """The rotation wrote the open list first, which read changes committed after the run
    began and split past them; then it closed the newest list at the run's start, before
    that list's own start. Every later run failed ("until is before from") and the set's
    documents stayed as they were, for good."""
    from sitemaps.regeneration import RegenerationRun, regenerate
    from sources.signals import events_ingested, receivers_muted

    resource_set = make_set(entries_per_document=5)
    created(resource_set, 3)
    rotate_after(resource_set, timedelta(seconds=0))  # every run closes the open list
    rotate = RegenerationRun.rotate

    def commit_later_changes_first(self, pages, changed):
        monkeypatch.setattr(RegenerationRun, "rotate", rotate)
        with receivers_muted(events_ingested):
            created(resource_set, 9, start=100)  # dated after the run's start
        return rotate(self, pages, changed)

    monkeypatch.setattr(RegenerationRun, "rotate", commit_later_changes_first)
    created(resource_set, 1, start=5)
    rotate_after(resource_set, timedelta(days=1))

    created(resource_set, 1, start=6)

    assert all(p.until is None or p.until >= p.since for p in ChangeListPage.objects.all())
    listed = every_listed_change(client)
    assert len(listed) == len(set(listed)) == 14
    assert regenerate(resource_set, full=True) is not None


def test_a_backlog_of_hundreds_of_full_lists_is_written_in_one_run(client):
    """Each full list was written by a call inside the previous one's: a backlog of a few
    hundred lists ended every run in a RecursionError, and the set stayed behind."""
    import sys

    from sitemaps.regeneration import regenerate
    from sources.signals import events_ingested, receivers_muted

    resource_set = make_set(entries_per_document=1)
    with receivers_muted(events_ingested):
        created(resource_set, 400)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(400)  # the depth must not grow with the backlog
    try:
        regenerate(resource_set)
    finally:
        sys.setrecursionlimit(limit)

    assert ChangeListPage.objects.count() == 400
    assert len(every_listed_change(client)) == 400


@pytest.mark.parametrize("path", ["changelist.xml", "capabilitylist.xml"])
def test_a_document_read_while_the_database_is_down_is_a_503_to_retry(client, monkeypatch, path):
    """During a PostgreSQL restart a document read answered Django's 500 (a destination
    cannot tell it from a bug); the API already answered 503 with Retry-After."""
    import psycopg
    from django.db import OperationalError

    from sitemaps import access, views

    created(make_set(), 1)

    def down(*args, **kwargs):
        error = OperationalError("connection refused")
        error.__cause__ = psycopg.OperationalError("connection refused")
        raise error

    monkeypatch.setattr(access.SetReadView, "get_resource_set", down)
    monkeypatch.setattr(views.StoredDocumentView, "find_document", down)

    response = client.get(f"{BASE}/{path}")

    assert response.status_code == 503
    assert response["Retry-After"] == "5"


def test_a_quiet_set_closes_no_empty_change_list(client):
    """Every rotation period closed the open list, changes or not: a quiet set gained an
    empty list a period, each invalid against the sitemap schema (one <url> at least)."""
    from sitemaps.regeneration import regenerate

    resource_set = make_set()
    created(resource_set, 2)
    rotate_after(resource_set, timedelta(seconds=0))  # every run finds the rotation due
    for _ in range(3):
        regenerate(resource_set)

    closed = ChangeListPage.objects.filter(until__isnull=False)
    assert [page.entries for page in closed] == [2]
    for page in closed:
        assert_valid(body(client, f"{BASE}/changelist-{page.number}.xml"))
    created(resource_set, 1, start=5)  # the quiet open list takes the next change
    assert ChangeListPage.objects.count() == 3
    assert every_listed_change(client) == [f"http://data.example.org/r/{n:07d}" for n in (0, 1, 5)]


def test_a_change_received_once_the_run_began_closes_no_empty_list(client, monkeypatch):
    """It made the rotation due, and the list closed at the run's time, before it: empty,
    final, and never written again."""
    from sitemaps.regeneration import RegenerationRun, regenerate

    resource_set = make_set()
    created(resource_set, 2)
    rotate_after(resource_set, timedelta(seconds=0))
    regenerate(resource_set)  # closes the first list; the second, open, stays empty
    change_lists = RegenerationRun.change_lists

    def received_meanwhile(run):
        monkeypatch.setattr(RegenerationRun, "change_lists", change_lists)
        created(resource_set, 1, start=9)  # dated after the run's time
        return change_lists(run)

    monkeypatch.setattr(RegenerationRun, "change_lists", received_meanwhile)
    regenerate(resource_set)
    regenerate(resource_set)  # the next run closes the list that holds it

    closed = ChangeListPage.objects.filter(until__isnull=False)
    assert [page.entries for page in closed] == [2, 1]


def test_the_beat_leaves_a_quiet_set_alone():
    """Its open list stays open, so a beat that asked only whether the period was over
    queued a run at every beat, for ever, each doing nothing."""
    from sitemaps import tasks
    from sitemaps.regeneration import regenerate

    resource_set = make_set()
    created(resource_set, 2)
    rotate_after(resource_set, timedelta(seconds=0))
    regenerate(resource_set)  # the first list closed, the second open and empty

    assert [tasks.regenerate_due_sets() for _ in range(3)] == [0, 0, 0]
