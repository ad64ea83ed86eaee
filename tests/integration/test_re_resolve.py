"""A set's documents follow a changed url_prefix (or PUBLIC_BASE_URL) after a regeneration.

Resources and changes located by `rel_path` or `abs_path` store the URI
resolved with the set's `url_prefix` at ingest; when the prefix changes,
their stored URIs (and their links') are resolved again and the documents
rewritten: the Resource List, the open Change List, the dumps and the
Elasticsearch mirror. Closed Change Lists and their Change Dump packages
stay as they were published (see sources/re_resolve.py). Rows posted with an
explicit `url` keep it.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from lxml import etree

from sitemaps.models import ChangeListPage
from sitemaps.regeneration import regenerate
from sources import services
from sources.events import Event, LinkData
from sources.generators import get_generator
from sources.models import (
    ApiToken,
    CapabilitySettings,
    Change,
    DataProvider,
    LocationType,
    Resource,
    ResourceSet,
)
from sources.services import ingest_events

from ..support import NS, assert_valid, store_documents_in

pytestmark = pytest.mark.django_db
BASE = "/resourcesync/acme/files"
PREFIX = "http://data.example.org/acme/files/"
MOVED = "https://files.example.net/archive/acme/"
ELSEWHERE = "http://elsewhere.example.com/kept.txt"
LASTMOD = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture(autouse=True)
def storage(settings, tmp_path: Path) -> None:
    store_documents_in(settings, tmp_path / "documents")


class FileSet:
    """A set of files under `root` posted as rel_path events, regenerated after each post."""

    def __init__(self, root: Path, *, prefix: str = PREFIX, **capabilities) -> None:
        self.root = root
        root.mkdir(exist_ok=True)
        provider, _ = DataProvider.objects.get_or_create(slug="acme", defaults={"name": "Acme"})
        self.resource_set = ResourceSet.objects.create(
            provider=provider, slug="files", name="files", url_prefix=prefix,
            resource_root_dir=str(root),
        )  # fmt: skip
        CapabilitySettings.objects.create(resource_set=self.resource_set, **capabilities)

    @property
    def prefix(self) -> str:
        return self.resource_set.url_prefix

    def write(self, name: str, version: int = 1, change: str = "created", **fields) -> Event:
        data = f"{name} version {version}\n".encode()
        (self.root / name).parent.mkdir(parents=True, exist_ok=True)
        (self.root / name).write_bytes(data)
        values = {
            "change": change,
            "location_type": LocationType.REL_PATH,
            "location_value": name,
            "uri": self.prefix + name,
            "length": len(data),
            "md5": hashlib.md5(data, usedforsecurity=False).hexdigest(),
            "sha256": hashlib.sha256(data).hexdigest(),
            "mime": "text/plain",
            "lastmod": LASTMOD,
            **fields,
        }
        return Event(**values)

    def delete(self, name: str) -> Event:
        (self.root / name).unlink()
        return Event(
            change="deleted",
            location_type=LocationType.REL_PATH,
            location_value=name,
            uri=self.prefix + name,
        )

    def post(self, events: list[Event], capture) -> None:
        """Ingest with the after-commit hooks (mirror, regeneration), then regenerate."""
        with capture(execute=True):
            ingest_events(resource_set=self.resource_set, events=events)
        regenerate(self.resource_set)

    def move_to(self, prefix: str, capture) -> None:
        """Change the url_prefix as the admin or create_resource_set does: a model save."""
        with capture(execute=True):
            self.resource_set.url_prefix = prefix
            self.resource_set.save()


def url_event(uri: str, change: str = "created") -> Event:
    return Event(
        change=change, location_type=LocationType.URL, location_value=uri, uri=uri,
        length=4, md5="0" * 32, mime="text/plain", lastmod=LASTMOD,
    )  # fmt: skip


def post_event(client: Client, files: FileSet, **event: Any) -> Any:
    """One event, a text file, posted through the API with a token of the set's provider."""
    _, key = ApiToken.issue(provider=files.resource_set.provider)
    return client.post(
        "/api/v1/sets/acme/files/events",
        data=[{"mime": "text/plain", "lastmod": "2026-01-02T03:04:05Z", **event}],
        content_type="application/json",
        headers={"Authorization": f"Token {key}"},
    )


def described(files: FileSet, name: str) -> Event:
    """A created event whose resource links its metadata record by rel_path."""
    record = name.replace(".txt", ".xml")
    link = LinkData(
        rel="describedby", href_type=LocationType.REL_PATH, href_value=record,
        mime="application/xml", uri=files.prefix + record,
    )  # fmt: skip
    return files.write(name, links=(link,))


def body(client: Client, path: str) -> bytes:
    response = client.get(path)
    assert response.status_code == 200, (path, response.status_code)
    return b"".join(response.streaming_content) if response.streaming else response.content


def urlsets(client: Client, top: str) -> list[bytes]:
    """The document at `top`, or every part of the index it is, each validated."""
    content = body(client, top)
    root = assert_valid(content)
    if root.tag != f"{{{NS['sm']}}}sitemapindex":
        return [content]
    locations = root.xpath("sm:sitemap/sm:loc/text()", namespaces=NS)
    parts = [body(client, urlsplit(loc).path) for loc in locations]
    for part in parts:
        assert_valid(part)
    return parts


def locs(documents: list[bytes]) -> list[str]:
    found = []
    for document in documents:
        found += etree.fromstring(document).xpath("sm:url/sm:loc/text()", namespaces=NS)
    return found


def link_hrefs(documents: list[bytes]) -> list[str]:
    found = []
    for document in documents:
        found += etree.fromstring(document).xpath("sm:url/rs:ln/@href", namespaces=NS)
    return found


def names(uris: list[str], prefix: str) -> list[str]:
    """The URIs under `prefix` as names; any other URI as it is."""
    return [uri.removeprefix(prefix) for uri in uris]


def history(files: FileSet, capture) -> None:
    """A closed Change List of creations, then an open one with an update and a delete."""
    files.post([described(files, "r0.txt"), files.write("r1.txt"), files.write("r2.txt"),
                url_event(ELSEWHERE)], capture)  # fmt: skip
    # Its rotation period has passed: the next run closes it.
    long_ago = datetime(2026, 1, 1, tzinfo=UTC)
    ChangeListPage.objects.filter(resource_set=files.resource_set).update(since=long_ago)
    regenerate(files.resource_set)
    files.post(
        [files.write("r1.txt", version=2, change="updated"), files.delete("r2.txt")], capture
    )
    pages = ChangeListPage.objects.filter(resource_set=files.resource_set).order_by("number")
    assert [page.final for page in pages] == [True, False]


def mirrored_uris(index: str, resource_set: ResourceSet) -> list[str]:
    mirror = get_generator().mirror
    mirror.refresh()
    response = mirror.client.search(
        index=index, query={"term": {"resource_set_id": resource_set.pk}}, size=1000
    )
    return [hit["_source"]["uri"] for hit in response["hits"]["hits"]]


def test_a_changed_url_prefix_moves_the_lists_and_the_mirror(
    backend, client, tmp_path, django_capture_on_commit_callbacks
):
    files = FileSet(tmp_path / "files", changelist_rotation=timedelta(days=1))
    history(files, django_capture_on_commit_callbacks)
    keys = dict(Resource.objects.values_list("location_value", "pk"))
    before = locs(urlsets(client, f"{BASE}/resourcelist.xml"))
    assert sorted(names(before, PREFIX)) == sorted(["r0.txt", "r1.txt", ELSEWHERE])
    closed = urlsets(client, f"{BASE}/changelist.xml")[0]

    files.move_to(MOVED, django_capture_on_commit_callbacks)

    resources = urlsets(client, f"{BASE}/resourcelist.xml")
    assert sorted(names(locs(resources), MOVED)) == sorted(["r0.txt", "r1.txt", ELSEWHERE])
    assert link_hrefs(resources) == [MOVED + "r0.xml"]
    # A closed list is a record of what was published: unchanged, to the byte.
    assert urlsets(client, f"{BASE}/changelist.xml")[0] == closed
    open_list = urlsets(client, f"{BASE}/changelist-open.xml")
    assert names(locs(open_list), MOVED) == ["r1.txt", "r2.txt"]
    # The same resources (keys), only their URIs moved; the explicit URL stayed.
    assert dict(Resource.objects.values_list("location_value", "pk")) == keys
    assert Change.objects.filter(uri__startswith=PREFIX).count() == 3  # the closed list's
    assert Change.objects.filter(uri=ELSEWHERE).count() == 1
    if backend == "elasticsearch":
        mirror = get_generator().mirror
        resources = mirrored_uris(mirror.resources_index, files.resource_set)
        assert sorted(names(resources, MOVED)) == sorted(["r0.txt", "r1.txt", ELSEWHERE])
        changes = mirrored_uris(mirror.changes_index, files.resource_set)
        assert sorted(changes) == sorted(Change.objects.values_list("uri", flat=True))


def test_dumps_follow_and_closed_packages_stay_as_published(
    client, tmp_path, django_capture_on_commit_callbacks
):
    files = FileSet(
        tmp_path / "files",
        publish_resource_dump=True,
        publish_change_dump=True,
        changelist_rotation=timedelta(days=1),
    )
    history(files, django_capture_on_commit_callbacks)
    closed_package = locs(urlsets(client, f"{BASE}/changedump.xml"))[0]
    closed_bitstreams = zip_bitstreams(client, closed_package)

    files.move_to(MOVED, django_capture_on_commit_callbacks)

    dump = urlsets(client, f"{BASE}/resourcedump.xml")
    manifests = [zip_manifest(client, loc) for loc in locs(dump)]
    assert sorted(names(locs(manifests), MOVED)) == ["r0.txt", "r1.txt"]
    closed_now, open_package = locs(urlsets(client, f"{BASE}/changedump.xml"))
    assert closed_now == closed_package
    assert zip_bitstreams(client, closed_now) == closed_bitstreams
    assert list(closed_bitstreams) == [
        (PREFIX + "r0.txt", b"r0.txt version 1\n"),
        (PREFIX + "r1.txt", b"r1.txt version 1\n"),
        (PREFIX + "r2.txt", b"r2.txt version 1\n"),
    ]
    # The open window's package is rebuilt under the new URIs, its bytes kept.
    assert list(zip_bitstreams(client, open_package)) == [(MOVED + "r1.txt", b"r1.txt version 2\n")]


def zip_manifest(client: Client, loc: str) -> bytes:
    archive = zipfile.ZipFile(io.BytesIO(body(client, urlsplit(loc).path)))
    manifest = archive.read("manifest.xml")
    assert_valid(manifest)
    return manifest


def zip_bitstreams(client: Client, loc: str) -> dict[tuple[str, bytes], None]:
    """(uri, bytes) of every bitstream of a Change Dump package, by its manifest."""
    archive = zipfile.ZipFile(io.BytesIO(body(client, urlsplit(loc).path)))
    manifest = assert_valid(archive.read("manifest.xml"))
    found = {}
    for url in manifest.findall("sm:url", NS):
        path = url.find("rs:md", NS).get("path")
        if path:
            found[(url.find("sm:loc", NS).text, archive.read(path.lstrip("/")))] = None
    return found


def test_a_prefix_moved_into_its_own_subfolder_swaps_uris_without_a_clash(
    client, tmp_path, django_capture_on_commit_callbacks
):
    files = FileSet(tmp_path / "files")
    files.post([files.write("x.txt"), files.write("b/x.txt")], django_capture_on_commit_callbacks)
    keys = dict(Resource.objects.values_list("location_value", "pk"))

    files.move_to(PREFIX + "b/", django_capture_on_commit_callbacks)

    moved = dict(Resource.objects.values_list("location_value", "uri"))
    assert moved == {"x.txt": PREFIX + "b/x.txt", "b/x.txt": PREFIX + "b/b/x.txt"}
    assert dict(Resource.objects.values_list("location_value", "pk")) == keys
    assert sorted(locs(urlsets(client, f"{BASE}/resourcelist.xml"))) == sorted(moved.values())


def test_where_a_moved_uri_meets_an_explicit_url_the_later_write_wins(
    client, tmp_path, django_capture_on_commit_callbacks
):
    files = FileSet(tmp_path / "files")
    capture = django_capture_on_commit_callbacks
    files.post([files.write("a.txt"), url_event(MOVED + "b.txt")], capture)
    files.post([files.write("b.txt"), url_event(MOVED + "a.txt")], capture)

    files.move_to(MOVED, capture)

    # a.txt's explicit URL came after the rel_path row, b.txt's before it.
    rows = Resource.objects.order_by("uri").values_list("uri", "location_type")
    assert list(rows) == [(MOVED + "a.txt", "url"), (MOVED + "b.txt", "rel_path")]
    assert sorted(locs(urlsets(client, f"{BASE}/resourcelist.xml"))) == [
        MOVED + "a.txt",
        MOVED + "b.txt",
    ]


def test_an_unchanged_prefix_rewrites_nothing(tmp_path, django_capture_on_commit_callbacks):
    files = FileSet(tmp_path / "files")
    files.post([files.write("a.txt")], django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        files.resource_set.name = "renamed"
        files.resource_set.save()
    runs = regenerate(files.resource_set)
    assert runs is not None and runs.pages_written == 0


def test_events_resolved_before_the_prefix_changed_are_refused(tmp_path):
    files = FileSet(tmp_path / "files")
    stale = ResourceSet.objects.get(pk=files.resource_set.pk)
    ResourceSet.objects.filter(pk=stale.pk).update(url_prefix=MOVED)
    with pytest.raises(getattr(services, "LocationsChanged", AssertionError)):
        ingest_events(resource_set=stale, events=[files.write("a.txt")])
    assert not Resource.objects.exists()


def test_the_api_answers_a_request_that_raced_a_prefix_change_with_503(
    client, tmp_path, monkeypatch
):
    files = FileSet(tmp_path / "files")
    real = services.resource_set_lock

    def moved_meanwhile(*, resource_set):
        ResourceSet.objects.filter(pk=resource_set.pk).update(url_prefix=MOVED)
        return real(resource_set=resource_set)

    monkeypatch.setattr(services, "resource_set_lock", moved_meanwhile)
    response = post_event(
        client, files, change="created", location={"type": "rel_path", "value": "a.txt"},
        length=1, md5="0" * 32,
    )  # fmt: skip
    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "1"
    assert "url_prefix" in response.json()["detail"]
    assert not Resource.objects.exists()


def test_the_command_re_resolves_rows_a_bulk_update_left_behind(client, tmp_path):
    files = FileSet(tmp_path / "files")
    ingest_events(resource_set=files.resource_set, events=[files.write("a.txt")])
    regenerate(files.resource_set)
    ResourceSet.objects.filter(pk=files.resource_set.pk).update(url_prefix=MOVED)  # no signal

    out = io.StringIO()
    call_command("re_resolve", "acme/files", stdout=out)

    assert "acme/files: re-resolved 1 resource(s) and 1 change(s)" in out.getvalue()
    assert locs(urlsets(client, f"{BASE}/resourcelist.xml")) == [MOVED + "a.txt"]
    assert locs(urlsets(client, f"{BASE}/changelist.xml")) == [MOVED + "a.txt"]
    again = io.StringIO()
    call_command("re_resolve", "acme/files", stdout=again)
    assert "acme/files: every stored URI is up to date" in again.getvalue()


def test_a_prefix_saved_in_the_admin_moves_the_documents(
    admin_client, tmp_path, django_capture_on_commit_callbacks
):
    files = FileSet(tmp_path / "files")
    files.post([files.write("a.txt")], django_capture_on_commit_callbacks)
    resource_set = files.resource_set
    data = {
        "provider": resource_set.provider_id,
        "slug": "files",
        "name": "files",
        "url_prefix": MOVED,
        "resource_root_dir": resource_set.resource_root_dir,
        "capability_settings-TOTAL_FORMS": "1",
        "capability_settings-INITIAL_FORMS": "1",
        "capability_settings-MIN_NUM_FORMS": "1",
        "capability_settings-MAX_NUM_FORMS": "1",
        "capability_settings-0-id": resource_set.capability_settings.pk,
        "capability_settings-0-resource_set": resource_set.pk,
        "capability_settings-0-publish_resource_list": "on",
        "capability_settings-0-publish_change_list": "on",
        "capability_settings-0-entries_per_document": "50000",
        "capability_settings-0-changelist_rotation": "1 00:00:00",
        "capability_settings-0-regenerate_after_changes": "1000",
        "capability_settings-0-regenerate_after_seconds": "1",
    }
    change = reverse("admin:sources_resourceset_change", args=[resource_set.pk])
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(change, data)
    assert response.status_code == 302, response.content.decode()[-3000:]
    assert locs(urlsets(admin_client, f"{BASE}/resourcelist.xml")) == [MOVED + "a.txt"]
    assert locs(urlsets(admin_client, f"{BASE}/changelist.xml")) == [MOVED + "a.txt"]


def test_the_command_follows_a_changed_public_base_url(client, settings, tmp_path):
    settings.PUBLIC_BASE_URL = "http://old.example.org"
    files = FileSet(tmp_path / "files", prefix="http://old.example.org/files/acme/files/")
    ingest_events(resource_set=files.resource_set, events=[files.write("a.txt")])
    regenerate(files.resource_set)
    settings.PUBLIC_BASE_URL = "https://portal.example.org"

    out = io.StringIO()
    call_command("re_resolve", "--from-base-url", "http://old.example.org/", stdout=out)

    assert "url_prefix http://old.example.org/files/acme/files/ -> " in out.getvalue()
    files.resource_set.refresh_from_db()
    assert files.resource_set.url_prefix == "https://portal.example.org/files/acme/files/"
    for top in ("resourcelist.xml", "changelist.xml"):
        (document,) = urlsets(client, f"{BASE}/{top}")
        assert locs([document]) == ["https://portal.example.org/files/acme/files/a.txt"]
        up = etree.fromstring(document).find("rs:ln[@rel='up']", NS).get("href")
        assert up == f"https://portal.example.org{BASE}/capabilitylist.xml"


def test_a_set_already_under_the_new_base_url_stays_where_it_is(client, settings, tmp_path):
    """With a new base of the old one plus a path, a set already moved (as `make run`
    moves the demo set) went under the path twice: /portal/portal/…"""
    settings.PUBLIC_BASE_URL = "http://127.0.0.1:8160/portal"
    files = FileSet(tmp_path / "files", prefix="http://127.0.0.1:8160/portal/files/acme/files/")

    call_command("re_resolve", "--from-base-url", "http://127.0.0.1:8160", stdout=io.StringIO())
    call_command("re_resolve", "--from-base-url", "http://127.0.0.1:8160", stdout=io.StringIO())

    files.resource_set.refresh_from_db()
    assert files.resource_set.url_prefix == "http://127.0.0.1:8160/portal/files/acme/files/"


def test_a_delete_posted_before_the_queued_task_runs_deletes_the_moved_resource(
    client, tmp_path, django_capture_on_commit_callbacks
):
    """The URIs move with the save itself: ingestion accepts events under the new prefix
    as soon as it commits, before the task that rewrites the documents runs."""
    files = FileSet(tmp_path / "files")
    files.post([files.write("a.txt"), files.write("b.txt")], django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=False) as queued:
        files.resource_set.url_prefix = MOVED
        files.resource_set.save()
    assert queued, "the documents are rewritten after the commit"

    files.post([files.delete("a.txt")], django_capture_on_commit_callbacks)
    for callback in queued:
        callback()
    regenerate(files.resource_set)

    assert list(Resource.objects.values_list("uri", flat=True)) == [MOVED + "b.txt"]
    assert locs(urlsets(client, f"{BASE}/resourcelist.xml")) == [MOVED + "b.txt"]


def test_the_command_writes_urls_stored_as_posted_in_their_uri_form(client, tmp_path):
    """Before, `url` locations were stored as posted: a raw IRI was published as is (resync
    cannot fetch it), and the same URL in its URI form became a second resource."""
    files = FileSet(tmp_path / "files")
    iri = "http://x.example.org/café/日本.txt"
    ingest_events(resource_set=files.resource_set, events=[url_event(iri)])  # as older code did

    out = io.StringIO()
    call_command("re_resolve", "acme/files", stdout=out)

    uri = "http://x.example.org/caf%C3%A9/%E6%97%A5%E6%9C%AC.txt"
    assert "re-resolved 1 resource(s)" in out.getvalue()
    assert locs(urlsets(client, f"{BASE}/resourcelist.xml")) == [uri]
    response = post_event(  # an update naming the IRI updates that resource
        client, files, change="updated", location={"type": "url", "value": iri},
        length=5, md5="1" * 32,
    )  # fmt: skip
    assert response.status_code == 200, response.content
    assert list(Resource.objects.values_list("uri", "length")) == [(uri, 5)]


def test_a_uri_a_new_prefix_makes_too_short_for_a_loc_stays_as_it_was(
    client, tmp_path, django_capture_on_commit_callbacks
):
    """`http://a/` is a valid url_prefix, under which the rel_path `b` is `http://a/b`: 10
    characters, where a `<loc>` needs 12. Ingestion refuses such an event with a 400; the
    prefix saved in the admin moved it there anyway, and the Resource List was no longer
    valid (found by the input probe). It stays where it was, as a location that no longer
    resolves does."""
    files = FileSet(tmp_path / "files")
    files.post([files.write("b"), files.write("long-name.txt")], django_capture_on_commit_callbacks)

    files.move_to("http://a/", django_capture_on_commit_callbacks)
    regenerate(files.resource_set)

    listed = locs(urlsets(client, f"{BASE}/resourcelist.xml"))  # each one valid
    assert sorted(listed) == ["http://a/long-name.txt", PREFIX + "b"]
