"""Which Resource List pages a regeneration rewrites when the tail is full."""

from __future__ import annotations

import pytest
from django.test import Client
from lxml import etree

from sitemaps.models import ResourceListPage
from sitemaps.regeneration import regenerate
from sources.models import Resource
from sources.services import ingest_events

from ..support import NS, assert_valid, created, event, make_set, store_documents_in

BASE = "/resourcesync/acme/articles"
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def served_entries(client: Client) -> list[str]:
    """Every entry of the served Resource List, page after page."""
    index = b"".join(client.get(f"{BASE}/resourcelist.xml").streaming_content)
    root = assert_valid(index)
    if root.tag.endswith("urlset"):
        return root.xpath("//sm:loc/text()", namespaces=NS)
    entries = []
    for loc in root.xpath("//sm:loc/text()", namespaces=NS):
        page = b"".join(client.get(loc.removeprefix("http://127.0.0.1:8000")).streaming_content)
        entries += etree.fromstring(page).xpath("//sm:loc/text()", namespaces=NS)
    return entries


def names(count: int, extra: tuple[str, ...] = ()) -> list[str]:
    return [f"http://data.example.org/r/{n:07d}" for n in range(count)] + [
        f"http://data.example.org/{name}" for name in extra
    ]


def test_a_create_after_an_exactly_full_tail_writes_only_the_new_page(client):
    """Issue 11: the full page's entries did not change, so it is not rewritten."""
    resource_set = make_set(entries_per_document=10)
    created(resource_set, 30)
    full_tail = ResourceListPage.objects.get(number=3)
    assert full_tail.entries == 10 and full_tail.through_key is None

    ingest_events(resource_set=resource_set, events=[event("created", "r/new")])
    report = regenerate(resource_set)

    assert report.resource_pages_written == [4]
    assert report.indexes_written == ["changelist.xml", "resourcelist.xml"]
    closed = ResourceListPage.objects.get(number=3)
    assert closed.etag == full_tail.etag
    assert closed.through_key == full_tail.last_key
    assert served_entries(client) == names(30, ("r/new",))


def test_a_full_tail_whose_entries_changed_is_rewritten_and_split():
    resource_set = make_set(entries_per_document=10)
    created(resource_set, 30)
    ingest_events(
        resource_set=resource_set,
        events=[event("updated", "r/0000025", version=2), event("created", "r/new")],
    )
    assert regenerate(resource_set).resource_pages_written == [3, 4]


def test_a_single_full_page_gaining_a_key_is_rewritten_as_part_of_the_index(client):
    """It now has a sibling, so it must link to the index: rewritten after the new page."""
    resource_set = make_set(entries_per_document=10)
    created(resource_set, 10)
    ingest_events(resource_set=resource_set, events=[event("created", "r/new")])
    assert sorted(regenerate(resource_set).resource_pages_written) == [1, 2]
    first = b"".join(client.get(f"{BASE}/resourcelist-1.xml").streaming_content)
    rels = [ln.get("rel") for ln in etree.fromstring(first).findall("rs:ln", NS)]
    assert "index" in rels
    assert served_entries(client) == names(10, ("r/new",))


def test_an_emptied_page_merges_into_the_next_one(client):
    resource_set = make_set(entries_per_document=3)
    created(resource_set, 7)
    first_key = Resource.objects.order_by("pk").values_list("pk", flat=True).first()
    ingest_events(
        resource_set=resource_set,
        events=[event("deleted", f"r/{n:07d}") for n in (3, 4, 5)],
    )
    regenerate(resource_set)
    offset = first_key - 1  # keys from 1, whatever the database's sequence gave
    ranges = [(p.after_key, p.through_key) for p in ResourceListPage.objects.order_by("after_key")]
    assert ranges == [(0, 3 + offset), (3 + offset, None)]
    assert served_entries(client) == names(3) + names(7)[6:]
