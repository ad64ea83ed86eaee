"""Change List retention: the index keeps the newest N closed lists, older ones are archived."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from django.test import Client

from sitemaps.change_list_archive import ArchivedList, build_change_list_archive, split_lists
from sitemaps.models import ChangeListPage, IndexDocument
from sitemaps.protocol.reader import parse_document
from sources.models import CapabilitySettings
from validator import validate_source

from ..support import assert_valid, created, make_set, store_documents_in

pytestmark = pytest.mark.django_db
BASE = "http://testserver"
SET = "/resourcesync/acme/articles"


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")
    settings.PUBLIC_BASE_URL = BASE


def get(client: Client, url: str) -> bytes:
    response = client.get(url.removeprefix(BASE))
    assert response.status_code == 200, url
    return b"".join(response.streaming_content) if response.streaming else response.content


def test_the_oldest_closed_lists_are_archived_and_stay_served(client):
    resource_set = make_set(entries_per_document=2, changelist_keep=2)
    created(resource_set, 11)  # lists fill at 2 entries: 5 closed, 1 open
    pages = list(ChangeListPage.objects.order_by("since"))
    assert [page.until is not None for page in pages] == [True] * 5 + [False]

    index = parse_document(get(client, f"{SET}/changelist.xml"))
    archive_body = get(client, f"{SET}/changelist-archive.xml")
    archive = parse_document(archive_body)

    kept = [f"{BASE}{SET}/changelist-{page.number}.xml" for page in pages[3:]]
    assert [entry.loc for entry in index.entries] == kept
    assert index.from_ == pages[3].since
    assert index.link("archives").href == f"{BASE}{SET}/changelist-archive.xml"
    assert_valid(archive_body)
    assert archive.capability == "changelist-archive" and not archive.is_index
    assert archive.link("up").href == f"{BASE}{SET}/capabilitylist.xml"
    assert [(e.loc, e.from_, e.until) for e in archive.entries] == [
        (f"{BASE}{SET}/changelist-{page.number}.xml", page.since, page.until) for page in pages[:3]
    ]
    for entry in archive.entries:  # archived documents stay served and valid
        assert_valid(get(client, entry.loc))
    capability_list = parse_document(get(client, f"{SET}/capabilitylist.xml"))
    listed = {entry.capability: entry.loc for entry in capability_list.entries}
    assert listed["changelist-archive"] == f"{BASE}{SET}/changelist-archive.xml"


def through_test_client(client: Client) -> httpx.MockTransport:
    """The portal in process, for the validator's HTTP client."""

    def handle(request: httpx.Request) -> httpx.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host",)}
        response = client.generic(request.method, request.url.raw_path.decode(), headers=headers)
        body = b"".join(response.streaming_content) if response.streaming else response.content
        return httpx.Response(
            response.status_code, headers=dict(response.items()), stream=httpx.ByteStream(body)
        )

    return httpx.MockTransport(handle)


def test_the_archived_set_passes_the_validator(client):
    resource_set = make_set(entries_per_document=2, changelist_keep=1)
    created(resource_set, 9)

    report = validate_source(
        f"{BASE}{SET}/capabilitylist.xml",
        extra_hosts=("data.example.org",),
        transport=through_test_client(client),
    )

    assert report.ok, report.problems
    assert f"{BASE}{SET}/changelist-archive.xml" in report.documents


def test_by_default_every_list_stays_in_the_index_and_no_archive_is_listed(client):
    resource_set = make_set(entries_per_document=2)
    created(resource_set, 7)

    index = parse_document(get(client, f"{SET}/changelist.xml"))

    assert len(index.entries) == ChangeListPage.objects.count() == 4
    assert index.link("archives") is None
    assert client.get(f"{SET}/changelist-archive.xml").status_code == 404
    capability_list = parse_document(get(client, f"{SET}/capabilitylist.xml"))
    assert "changelist-archive" not in {entry.capability for entry in capability_list.entries}


def test_keeping_all_again_brings_the_lists_back_and_withdraws_the_archive(client):
    resource_set = make_set(entries_per_document=2, changelist_keep=1)
    created(resource_set, 7)
    assert IndexDocument.objects.filter(kind="changelist-archive").exists()
    CapabilitySettings.objects.filter(resource_set=resource_set).update(changelist_keep=None)

    created(resource_set, 1, start=100)

    assert not IndexDocument.objects.filter(kind="changelist-archive").exists()
    assert client.get(f"{SET}/changelist-archive.xml").status_code == 404
    index = parse_document(get(client, f"{SET}/changelist.xml"))
    assert len(index.entries) == ChangeListPage.objects.count()


def test_split_keeps_the_open_list_and_the_newest_closed_ones():
    assert split_lists([True, True, True, False], None) == ([], [0, 1, 2, 3])
    assert split_lists([True, True, True, False], 2) == ([0], [1, 2, 3])
    assert split_lists([True, True, True, False], 5) == ([], [0, 1, 2, 3])
    assert split_lists([True, True, True], 1) == ([0, 1], [2])


def test_the_archive_refuses_lists_out_of_order():
    t = datetime(2026, 1, 1, tzinfo=UTC)
    later = ArchivedList("http://x/2.xml", t + timedelta(days=1), t + timedelta(days=2))
    earlier = ArchivedList("http://x/1.xml", t, t + timedelta(days=1))
    with pytest.raises(ValueError, match="oldest first"):
        build_change_list_archive([later, earlier], capability_list_url="http://x/cl.xml")
