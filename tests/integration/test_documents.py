"""What destinations see: documents served, paged, regenerated only where changed."""

from __future__ import annotations

import gzip
from datetime import datetime, timedelta

import pytest
from django.test import Client, TestCase
from django.utils import timezone
from lxml import etree

from sitemaps.models import ChangeListPage, ResourceListPage
from sitemaps.regeneration import regenerate
from sources.models import ApiToken, Change
from sources.services import ingest_events

from ..support import NS, assert_valid, created, event, ingest, make_set, store_documents_in

BASE = "/resourcesync/acme/articles"
LATER = "http://data.example.org/later"
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def parse(value: str) -> datetime:
    return datetime.fromisoformat(value)


def get(client: Client, path: str, **headers) -> tuple[int, bytes, object]:
    response = client.get(path, headers=headers)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return response.status_code, body, response


def locs(content: bytes) -> list[str]:
    return etree.fromstring(content).xpath("//sm:loc/text()", namespaces=NS)


def md(content: bytes) -> dict[str, str]:
    return dict(etree.fromstring(content).find("rs:md", NS).attrib)


def test_small_set_is_one_resource_list_with_every_entry(client):
    resource_set = make_set()
    created(resource_set, 3)
    status, body, response = get(client, f"{BASE}/resourcelist.xml")
    assert status == 200
    assert response["Content-Type"] == "application/xml"
    root = assert_valid(body)
    assert root.tag == f"{{{NS['sm']}}}urlset"
    assert md(body)["capability"] == "resourcelist"
    assert locs(body) == [f"http://data.example.org/r/{n:07d}" for n in range(3)]
    entry = root.find("sm:url", NS)
    assert entry.find("sm:lastmod", NS).text == "2026-01-02T03:04:05Z"
    attributes = entry.find("rs:md", NS).attrib
    assert attributes["hash"].startswith("md5:") and attributes["type"] == "text/plain"
    link = entry.find("rs:ln", NS).attrib
    assert link == {
        "rel": "describedby",
        "href": "http://data.example.org/r/0000000.xml",
        "type": "application/xml",
    }
    up = root.find("rs:ln", NS).attrib
    assert up == {"rel": "up", "href": f"http://127.0.0.1:8000{BASE}/capabilitylist.xml"}


def test_120000_resources_make_three_pages_under_an_index(client):
    resource_set = make_set()
    # One regeneration after the whole load, as the threshold would do.
    ingest_events(
        resource_set=resource_set, events=(event("created", f"r/{n:07d}") for n in range(120_000))
    )
    regenerate(resource_set)
    status, body, _ = get(client, f"{BASE}/resourcelist.xml")
    index = assert_valid(body)
    assert index.tag == f"{{{NS['sm']}}}sitemapindex"
    parts = locs(body)
    assert parts == [f"http://127.0.0.1:8000{BASE}/resourcelist-{n}.xml" for n in (1, 2, 3)]
    seen = []
    for part in parts:
        status, page, _ = get(client, part.removeprefix("http://127.0.0.1:8000"))
        assert status == 200
        root = assert_valid(page)
        rels = {ln.get("rel"): ln.get("href") for ln in root.findall("rs:ln", NS)}
        assert rels["index"] == f"http://127.0.0.1:8000{BASE}/resourcelist.xml"
        seen += locs(page)
    assert len(seen) == 120_000 == len(set(seen))
    assert [p.entries for p in ResourceListPage.objects.order_by("after_key")] == [
        50_000,
        50_000,
        20_000,
    ]


def test_update_create_and_delete_rewrite_only_their_page(settings):
    resource_set = make_set(entries_per_document=10)
    created(resource_set, 35)
    pages = {p.number: p.etag for p in ResourceListPage.objects.all()}
    assert sorted(pages) == [1, 2, 3, 4]

    # Without the after-commit hooks, so each regeneration's report can be read.
    ingest_events(resource_set=resource_set, events=[event("updated", "r/0000012", version=2)])
    report = regenerate(resource_set)
    assert report.resource_pages_written == [2]
    assert "resourcelist.xml" in report.indexes_written

    ingest_events(resource_set=resource_set, events=[event("created", "r/new")])
    assert regenerate(resource_set).resource_pages_written == [4]

    ingest_events(resource_set=resource_set, events=[event("deleted", "r/0000003")])
    assert regenerate(resource_set).resource_pages_written == [1]
    after = {p.number: p.etag for p in ResourceListPage.objects.all()}
    assert [n for n in after if after[n] != pages[n]] == [1, 2, 4]


def test_nothing_changed_rewrites_nothing():
    resource_set = make_set()
    created(resource_set, 5)
    assert regenerate(resource_set).pages_written == 0


def test_byte_limit_closes_a_page_early(settings, client):
    settings.RESOURCESYNC_MAX_DOCUMENT_BYTES = 2000
    resource_set = make_set()
    created(resource_set, 20)
    pages = list(ResourceListPage.objects.order_by("after_key"))
    assert len(pages) > 1
    assert all(page.size <= 2000 for page in pages)
    _, body, _ = get(client, f"{BASE}/resourcelist.xml")
    total = sum(
        len(locs(get(client, p.removeprefix("http://127.0.0.1:8000"))[1])) for p in locs(body)
    )
    assert total == 20


def test_change_list_index_shows_closed_and_open_lists(client):
    resource_set = make_set(entries_per_document=5)
    created(resource_set, 12)
    _, body, _ = get(client, f"{BASE}/changelist.xml")
    index = assert_valid(body)
    assert index.tag == f"{{{NS['sm']}}}sitemapindex"
    parts = index.findall("sm:sitemap", NS)
    windows = [dict(part.find("rs:md", NS).attrib) for part in parts]
    assert [("until" in w) for w in windows] == [True, True, False]
    lists = ChangeListPage.objects.order_by("since")
    for part, page in zip(parts, lists, strict=True):
        _, content, _ = get(
            client, part.findtext("sm:loc", namespaces=NS).removeprefix("http://127.0.0.1:8000")
        )
        root = assert_valid(content)
        window = md(content)
        assert (page.until is None) == ("until" not in window)
        assert window.get("until") == part.find("rs:md", NS).get("until")
        assert window["from"] == part.find("rs:md", NS).get("from")
        datetimes = [parse(u.find("rs:md", NS).get("datetime")) for u in root.findall("sm:url", NS)]
        assert datetimes == sorted(datetimes)
        assert all(parse(window["from"]) <= d for d in datetimes)
        if "until" in window:
            assert all(d <= parse(window["until"]) for d in datetimes)
    all_entries = sum(page.entries for page in lists)
    assert all_entries == 12
    assert ChangeListPage.objects.filter(until__isnull=False, final=False).count() == 0


def test_rotation_closes_the_open_list_and_closed_lists_are_never_rewritten(client):
    resource_set = make_set(changelist_rotation=timedelta(seconds=0))
    created(resource_set, 2)
    first = ChangeListPage.objects.get(number=1)
    assert first.until is not None and first.final
    etag = first.etag
    created(resource_set, 2, start=10)
    first.refresh_from_db()
    assert first.etag == etag
    assert ChangeListPage.objects.filter(until__isnull=True).count() == 1
    entries = [
        u.find("rs:md", NS).get("change")
        for page in ChangeListPage.objects.all()
        for u in etree.fromstring(get(client, f"{BASE}/changelist-{page.number}.xml")[1]).findall(
            "sm:url", NS
        )
    ]
    assert entries == ["created"] * 4


def test_events_before_the_open_list_are_refused():
    from sources.services import EventsRejected

    resource_set = make_set(changelist_rotation=timedelta(seconds=0))
    created(resource_set, 1)
    resource_set.refresh_from_db()
    old = resource_set.accepts_changes_since - timedelta(days=1)
    with pytest.raises(EventsRejected) as rejected:
        ingest(resource_set, [event("created", "late", datetime=old)])
    assert rejected.value.errors[0].field == "datetime"
    assert not Change.objects.filter(uri__endswith="late").exists()


def test_a_posted_change_shows_in_the_open_change_list(client):
    resource_set = make_set()
    created(resource_set, 1)
    ingest(resource_set, [event("deleted", "r/0000000")])
    open_list = ChangeListPage.objects.get(until__isnull=True)
    _, body, _ = get(client, f"{BASE}/changelist-{open_list.number}.xml")
    changes = [u.find("rs:md", NS).attrib for u in etree.fromstring(body).findall("sm:url", NS)]
    assert [c["change"] for c in changes] == ["created", "deleted"]
    assert "hash" not in changes[1] and "hash" in changes[0]


def test_conditional_get_head_and_gzip(client):
    make_set()
    resource_set = make_set("acme", "other")
    created(resource_set, 3)
    path = "/resourcesync/acme/other/resourcelist.xml"
    _, body, response = get(client, path)
    etag, modified = response["ETag"], response["Last-Modified"]
    assert get(client, path, if_none_match=etag)[0] == 304
    assert get(client, path, if_modified_since=modified)[0] == 304
    status, zipped, response = get(client, path, accept_encoding="gzip, deflate")
    assert status == 200 and response["Content-Encoding"] == "gzip"
    assert gzip.decompress(zipped) == body
    assert response["ETag"] != etag and "Accept-Encoding" in response["Vary"]
    head = client.head(path)
    assert head.status_code == 200 and head["Content-Length"] == str(len(body))
    assert not b"".join(getattr(head, "streaming_content", [head.content]))


def test_unknown_set_page_and_unpublished_capability_are_404(client):
    resource_set = make_set(publish_change_list=False)
    created(resource_set, 1)
    assert client.get("/resourcesync/acme/missing/resourcelist.xml").status_code == 404
    assert client.get(f"{BASE}/resourcelist-99.xml").status_code == 404
    assert client.get(f"{BASE}/changelist.xml").status_code == 404
    capabilities = etree.fromstring(client.get(f"{BASE}/capabilitylist.xml").content)
    assert [u.find("rs:md", NS).get("capability") for u in capabilities.findall("sm:url", NS)] == [
        "resourcelist"
    ]


def test_protected_sets_need_a_token_of_their_provider(client, django_user_model):
    resource_set = make_set(protected=True)
    public = make_set("other", "open")
    created(resource_set, 1)
    _, own = ApiToken.issue(provider=resource_set.provider)
    _, foreign = ApiToken.issue(provider=public.provider)
    staff = django_user_model.objects.create(username="staff", is_staff=True)
    _, staff_key = ApiToken.issue(user=staff)
    path = f"{BASE}/resourcelist.xml"
    assert client.get(path).status_code == 401
    assert client.get(path, headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.get(path, headers={"Authorization": f"Bearer {foreign}"}).status_code == 403
    assert client.get(path, headers={"Authorization": f"Bearer {own}"}).status_code == 200
    assert client.get(path, headers={"Authorization": f"Bearer {staff_key}"}).status_code == 200

    def listed(**headers) -> list[str]:
        return locs(client.get("/.well-known/resourcesync", headers=headers).content)

    assert listed() == ["http://127.0.0.1:8000/resourcesync/other/open/capabilitylist.xml"]
    assert len(listed(authorization=f"Bearer {own}")) == 2
    assert len(listed(authorization=f"Bearer {foreign}")) == 1


def test_source_description_and_capability_list_are_valid(client):
    with TestCase.captureOnCommitCallbacks(execute=True):  # a new set's documents
        make_set()
    body = client.get("/.well-known/resourcesync").content
    assert_valid(body)
    assert md(body)["capability"] == "description"
    capability_list = client.get(f"{BASE}/capabilitylist.xml").content
    root = assert_valid(capability_list)
    assert root.find("rs:ln", NS).attrib == {
        "rel": "up",
        "href": "http://127.0.0.1:8000/.well-known/resourcesync",
    }
    assert [u.find("rs:md", NS).get("capability") for u in root.findall("sm:url", NS)] == [
        "resourcelist",
        "changelist",
    ]


def test_values_from_events_cannot_inject_markup(client):
    resource_set = make_set()
    hostile = 'x"/><evil/><rs:ln rel="a'
    ingest(
        resource_set,
        [
            event(
                "created",
                "r/1",
                mime="text/plain",
                location_value=hostile,
                uri="http://data.example.org/a&b<c>",
            )
        ],
    )
    _, body, _ = get(client, f"{BASE}/resourcelist.xml")
    root = etree.fromstring(body)
    assert not root.xpath("//evil")
    assert locs(body) == ["http://data.example.org/a&b<c>"]


def test_resync_library_reads_every_document(client):
    from resync.capability_list import CapabilityList
    from resync.change_list import ChangeList
    from resync.resource_list import ResourceList
    from resync.sitemap import Sitemap

    resource_set = make_set(entries_per_document=4)
    created(resource_set, 9)
    ingest(resource_set, [event("updated", "r/0000001", version=2), event("deleted", "r/0000002")])
    reader = Sitemap()
    parts = reader.parse_xml(fh=_stream(client.get(f"{BASE}/resourcelist.xml")))
    assert reader.parsed_index is True
    assert [part.uri for part in parts] == [
        f"http://127.0.0.1:8000{BASE}/resourcelist-{n}.xml" for n in (1, 2, 3)
    ]
    resources = []
    for n in (1, 2, 3):
        part = ResourceList()
        part.parse(fh=_stream(client.get(f"{BASE}/resourcelist-{n}.xml")))
        resources += list(part)
    assert len(resources) == 8
    assert all(r.md5 and r.length and r.mime_type == "text/plain" for r in resources)
    changes = []
    for page in ChangeListPage.objects.order_by("since"):
        part = ChangeList()
        part.parse(fh=_stream(client.get(f"{BASE}/changelist-{page.number}.xml")))
        changes += list(part)
    assert len(changes) == 11
    assert [c.change for c in changes][-2:] == ["updated", "deleted"]
    assert all(c.datetime is not None for c in changes)
    capability_list = CapabilityList()
    capability_list.parse(fh=_stream(client.get(f"{BASE}/capabilitylist.xml")))
    assert capability_list.has_capability("resourcelist")
    assert capability_list.has_capability("changelist")
    assert capability_list.capability_info("changelist").uri.endswith("/changelist.xml")


def _stream(response):
    import io

    body = b"".join(response.streaming_content) if response.streaming else response.content
    return io.BytesIO(body)


def test_more_changes_at_one_instant_than_a_list_holds_are_split_inside_it(client, backend):
    """A harvester may date a whole batch with one instant. The lists then split inside it
    (the closed one's `until` is the next one's `from`), each change is in exactly one
    list, and the set goes on publishing: it stopped for good before."""
    resource_set = make_set(entries_per_document=3)
    # After the open list's start (the set's creation), written with its trailing zero cut.
    now = timezone.now()
    moment = now - timedelta(microseconds=now.microsecond % 10 or 10)
    ingest(resource_set, [event("created", f"same/{n}", datetime=moment) for n in range(7)])
    ingest(resource_set, [event("created", "later")])
    expected = sorted([f"http://data.example.org/same/{n}" for n in range(7)] + [LATER])

    def published() -> tuple[list[str], list[tuple[datetime, datetime | None]]]:
        _, body, _ = get(client, f"{BASE}/changelist.xml")
        seen, windows = [], []
        for part in assert_valid(body).findall("sm:sitemap", NS):
            url = part.findtext("sm:loc", namespaces=NS).removeprefix("http://127.0.0.1:8000")
            status, content, _ = get(client, url)
            assert status == 200
            assert_valid(content)
            window = md(content)
            until = window.get("until")
            windows.append((parse(window["from"]), None if until is None else parse(until)))
            seen += locs(content)
        return sorted(seen), windows

    seen, windows = published()
    assert seen == expected
    assert windows[:2] == [(windows[0][0], moment), (moment, moment)]
    assert windows[2] == (moment, None)
    # A full run writes the same lists again.
    regenerate(resource_set, full=True)
    assert published() == (seen, windows)


def test_a_list_closed_by_time_while_over_full_loses_no_change(client):
    """Many changes arrive, then the rotation period has passed by the next run: the open
    list is split to the limits before it is closed, not written with its first entries."""
    resource_set = make_set(entries_per_document=3, changelist_rotation=timedelta(seconds=0))
    ingest_events(resource_set=resource_set, events=[event("created", f"r/{n}") for n in range(7)])

    regenerate(resource_set)

    seen = []
    for page in ChangeListPage.objects.filter(resource_set=resource_set):
        status, content, _ = get(client, f"{BASE}/changelist-{page.number}.xml")
        assert status == 200
        seen += locs(content)
    assert sorted(seen) == sorted(f"http://data.example.org/r/{n}" for n in range(7))
