"""No advertised document answers 404: a new set serves valid, empty documents at once.

Sets are created the ways operators create them (the admin, `create_resource_set`)
in committed transactions, so the after-commit hooks run as in production;
then every URL the Source Description leads to is read, by the project's reader
and by the resync library.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from lxml import etree

from sitemaps.protocol.reader import Document, parse_document
from sitemaps.regeneration import regenerate
from sources.models import ApiToken, DataProvider, ResourceSet
from sources.services import EventsRejected, ingest_events

from ..support import assert_valid, event, make_set, store_documents_in

HOST = "http://127.0.0.1:8000"


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def read(client: Client, url: str, token: str | None) -> bytes:
    assert url.startswith(HOST), url
    headers = {"authorization": f"Bearer {token}"} if token else {}
    response = client.get(url.removeprefix(HOST), headers=headers)
    assert response.status_code == 200, f"{url} answers {response.status_code}"
    return b"".join(response.streaming_content) if response.streaming else response.content


def read_with_resync(content: bytes, document: Document) -> None:
    """Parse as resync 2.0.1 does for this kind of document (raises if it cannot)."""
    from resync.capability_list import CapabilityList
    from resync.change_list import ChangeList
    from resync.resource_list import ResourceList
    from resync.sitemap import Sitemap
    from resync.source_description import SourceDescription

    if document.is_index:
        reader = Sitemap()
        reader.parse_xml(fh=io.BytesIO(content))
        assert reader.parsed_index
        return
    kinds = {
        "description": SourceDescription,
        "capabilitylist": CapabilityList,
        "resourcelist": ResourceList,
        "changelist": ChangeList,
    }
    kinds[document.capability]().parse(fh=io.BytesIO(content))


def crawl(client: Client, token: str | None = None) -> dict[str, Document]:
    """Every document reachable from the Source Description, each read and parsed.

    Entries of Resource and Change Lists are resources, not documents; every
    other `loc` and every root link is followed.
    """
    seen: dict[str, Document] = {}
    queue = [f"{HOST}/.well-known/resourcesync"]
    while queue:
        url = queue.pop(0)
        if url in seen:
            continue
        content = read(client, url, token)
        document = parse_document(content)
        read_with_resync(content, document)
        seen[url] = document
        queue += [link.href for link in document.links]
        if document.is_index or document.capability in ("description", "capabilitylist"):
            queue += [entry.loc for entry in document.entries]
    return seen


def capabilities(documents: dict[str, Document], resource_set: ResourceSet) -> list[str]:
    url = f"{HOST}/resourcesync/{resource_set.path}/capabilitylist.xml"
    return [entry.capability for entry in documents[url].entries]


ADMIN_FORM = {
    "slug": "new",
    "name": "New",
    "url_prefix": "https://data.example.org/new/",
    "capability_settings-TOTAL_FORMS": "1",
    "capability_settings-INITIAL_FORMS": "0",
    "capability_settings-MIN_NUM_FORMS": "1",
    "capability_settings-MAX_NUM_FORMS": "1",
    "capability_settings-0-publish_resource_list": "on",
    "capability_settings-0-publish_change_list": "on",
    "capability_settings-0-entries_per_document": "100",
    "capability_settings-0-changelist_rotation": "1 00:00:00",
    "capability_settings-0-regenerate_after_changes": "10",
    "capability_settings-0-regenerate_after_seconds": "5",
}


@pytest.mark.django_db(transaction=True)
def test_a_set_created_in_the_admin_serves_every_document_it_advertises(admin_client, client):
    provider = DataProvider.objects.create(name="Acme", slug="acme")
    response = admin_client.post(
        reverse("admin:sources_resourceset_add"), {**ADMIN_FORM, "provider": provider.pk}
    )
    assert response.status_code == 302, response.content[:2000]

    documents = crawl(client)

    resource_set = ResourceSet.objects.get(slug="new")
    assert capabilities(documents, resource_set) == ["resourcelist", "changelist"]
    base = f"{HOST}/resourcesync/acme/new"
    resource_list = documents[f"{base}/resourcelist.xml"]
    change_list = documents[f"{base}/changelist.xml"]
    assert (resource_list.capability, resource_list.entries) == ("resourcelist", ())
    assert (change_list.capability, change_list.entries, change_list.until) == (
        "changelist",
        (),
        None,
    )
    assert change_list.from_ is not None and resource_list.at is not None
    # Valid except for the sitemap schema's one-<url> minimum, which an empty list cannot meet.
    for name in ("resourcelist.xml", "changelist.xml"):
        with pytest.raises(etree.DocumentInvalid, match="Missing child element"):
            assert_valid(read(client, f"{base}/{name}", None))
    assert read(client, f"{base}/changelist-open.xml", None) == read(
        client, f"{base}/changelist.xml", None
    )


def create_by_command(*options: str) -> ResourceSet:
    """acme/reports, created by `create_resource_set` as an operator would (committed)."""
    call_command(
        "create_resource_set",
        "acme",
        "reports",
        "--url-prefix",
        "https://data.example.org/reports/",
        *options,
        stdout=io.StringIO(),
    )
    return ResourceSet.objects.get(slug="reports")


@pytest.mark.django_db(transaction=True)
def test_a_protected_set_created_by_the_command_serves_every_document_to_its_token(client):
    resource_set = create_by_command("--protected")
    _, key = ApiToken.issue(provider=resource_set.provider)

    documents = crawl(client, key)

    assert capabilities(documents, resource_set) == ["resourcelist", "changelist"]
    assert len(documents) == 4  # Source Description, Capability List and its two lists


@pytest.mark.django_db(transaction=True)
def test_turning_the_change_list_on_in_the_admin_writes_it_before_it_is_advertised(
    admin_client, client
):
    provider = DataProvider.objects.create(name="Acme", slug="acme")
    form = {**ADMIN_FORM, "provider": provider.pk}
    del form["capability_settings-0-publish_change_list"]
    admin_client.post(reverse("admin:sources_resourceset_add"), form)
    resource_set = ResourceSet.objects.get(slug="new")
    assert capabilities(crawl(client), resource_set) == ["resourcelist"]

    response = admin_client.post(
        reverse("admin:sources_resourceset_change", args=[resource_set.pk]),
        {
            **form,
            "capability_settings-INITIAL_FORMS": "1",
            "capability_settings-0-id": resource_set.capability_settings.pk,
            "capability_settings-0-resource_set": resource_set.pk,
            "capability_settings-0-publish_change_list": "on",
        },
    )
    assert response.status_code == 302, response.content[:2000]

    assert capabilities(crawl(client), resource_set) == ["resourcelist", "changelist"]


@pytest.mark.django_db(transaction=True)
def test_turning_dumps_on_in_the_admin_writes_them_at_once(admin_client, client, tmp_path):
    """They waited for a change or the rotation: up to a day for a quiet set."""
    (tmp_path / "files").mkdir()
    provider = DataProvider.objects.create(name="Acme", slug="acme")
    form = {**ADMIN_FORM, "provider": provider.pk, "resource_root_dir": str(tmp_path / "files")}
    admin_client.post(reverse("admin:sources_resourceset_add"), form)
    resource_set = ResourceSet.objects.get(slug="new")

    response = admin_client.post(
        reverse("admin:sources_resourceset_change", args=[resource_set.pk]),
        {
            **form,
            "capability_settings-INITIAL_FORMS": "1",
            "capability_settings-0-id": resource_set.capability_settings.pk,
            "capability_settings-0-resource_set": resource_set.pk,
            "capability_settings-0-publish_resource_dump": "on",
            "capability_settings-0-publish_change_dump": "on",
        },
    )
    assert response.status_code == 302, response.content[:2000]

    listed = parse_document(read(client, f"{HOST}/resourcesync/acme/new/capabilitylist.xml", None))
    assert [entry.capability for entry in listed.entries] == [
        "resourcelist",
        "changelist",
        "resourcedump",
        "changedump",
    ]
    for kind in ("resourcedump", "changedump"):
        read(client, f"{HOST}/resourcesync/acme/new/{kind}.xml", None)


@pytest.mark.django_db
def test_the_capability_list_advertises_only_documents_already_written(client):
    resource_set = make_set()  # no commit here, so nothing is written yet
    path = "/resourcesync/acme/articles/capabilitylist.xml"
    assert parse_document(client.get(path).content).entries == ()
    assert client.get("/resourcesync/acme/articles/changelist.xml").status_code == 404

    regenerate(resource_set)

    listed = [entry.loc for entry in parse_document(client.get(path).content).entries]
    assert listed == [
        f"{HOST}/resourcesync/acme/articles/resourcelist.xml",
        f"{HOST}/resourcesync/acme/articles/changelist.xml",
    ]


@pytest.mark.django_db(transaction=True)
def test_a_new_set_takes_events_dated_from_its_creation_on(client):
    """Its first Change List opens with the set, and nothing may fall before an open list."""
    call_command(
        "create_resource_set",
        "acme",
        "log",
        "--url-prefix",
        "https://d.example.org/",
        stdout=io.StringIO(),
    )
    resource_set = ResourceSet.objects.get(slug="log")
    history = event("created", "old", datetime=datetime(2024, 5, 1, tzinfo=UTC))

    with pytest.raises(EventsRejected) as rejected:
        ingest_events(resource_set=resource_set, events=[history])
    ingest_events(resource_set=resource_set, events=[event("created", "new")])  # dated on receipt

    assert rejected.value.errors[0].field == "datetime"
    document = parse_document(read(client, f"{HOST}/resourcesync/acme/log/changelist.xml", None))
    assert [entry.loc for entry in document.entries] == ["http://data.example.org/new"]


@pytest.mark.django_db(transaction=True)
def test_a_set_created_before_the_elasticsearch_indices_exist_serves_its_documents(
    use_elasticsearch, client, caplog
):
    """The README lets the first indexing create the indices: a set created before
    any (no `search_index --create` yet) writes its empty documents, logging no error."""
    use_elasticsearch.mirror.delete_indices()

    resource_set = create_by_command()

    assert [record.getMessage() for record in caplog.records if record.levelname == "ERROR"] == []
    assert capabilities(crawl(client), resource_set) == ["resourcelist", "changelist"]
