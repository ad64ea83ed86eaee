"""Resource and Change Dumps: packages of real files, checked, incremental, served.

Every dump document and manifest is validated against the official schemas
and read back with resync; every packaged bitstream is compared with its
manifest entry and with the file it came from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import io
import itertools
import os
import re
import threading
import zipfile
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from lxml import etree
from resync.change_dump import ChangeDump
from resync.change_dump_manifest import ChangeDumpManifest
from resync.resource_dump import ResourceDump
from resync.resource_dump_manifest import ResourceDumpManifest

from sitemaps.lease import LeaseLost
from sitemaps.models import (
    ChangePackage,
    DumpDocument,
    DumpState,
    RegenerationState,
    ResourcePackage,
)
from sitemaps.regeneration import regenerate
from sitemaps.storage import document_storage
from sources.events import Event
from sources.generators import get_generator
from sources.models import ApiToken, CapabilitySettings, DataProvider, LocationType, ResourceSet
from sources.services import ingest_events

from ..support import NS, assert_valid, ingest, store_documents_in

pytestmark = pytest.mark.django_db
BASE = "/resourcesync/acme/files"
PREFIX = "http://data.example.org/acme/files/"


@pytest.fixture(autouse=True)
def storage(settings, tmp_path: Path) -> None:
    store_documents_in(settings, tmp_path / "documents")


class FileSet:
    """A set whose resources are files under `root`, with dumps on."""

    def __init__(
        self, root: Path, *, slug: str = "files", protected: bool = False, **capabilities
    ) -> None:
        self.root = root
        self.prefix = PREFIX if slug == "files" else f"http://data.example.org/acme/{slug}/"
        root.mkdir(exist_ok=True)
        provider, _ = DataProvider.objects.get_or_create(slug="acme", defaults={"name": "Acme"})
        self.resource_set = ResourceSet.objects.create(
            provider=provider,
            slug=slug,
            name=slug,
            url_prefix=self.prefix,
            resource_root_dir=str(root),
            protected=protected,
        )
        options = {"publish_resource_dump": True, "publish_change_dump": True, **capabilities}
        CapabilitySettings.objects.create(resource_set=self.resource_set, **options)

    def write(self, name: str, content: bytes, change: str = "created") -> Event:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        return Event(
            change=change,
            location_type=LocationType.REL_PATH,
            location_value=name,
            uri=self.prefix + name.replace(" ", "%20"),
            length=len(content),
            md5=hashlib.md5(content, usedforsecurity=False).hexdigest(),
            sha256=hashlib.sha256(content).hexdigest(),
            mime="text/plain",
            lastmod=self_lastmod(),
        )

    def delete(self, name: str) -> Event:
        (self.root / name).unlink()
        return Event(
            change="deleted",
            location_type=LocationType.REL_PATH,
            location_value=name,
            uri=self.prefix + name.replace(" ", "%20"),
        )

    def post(self, events: list[Event]):
        """Ingest without the after-commit hooks, index (for Elasticsearch) and regenerate:
        the run's report."""
        ingest_events(resource_set=self.resource_set, events=events)
        mirror = getattr(get_generator(), "mirror", None)
        if mirror is not None:  # not `index_pending`, whose signal regenerates (eager tasks)
            mirror.index_changes(list(self.resource_set.changes.values_list("pk", flat=True)))
        return regenerate(self.resource_set)


def with_a_final_change_package(root: Path, count: int) -> ChangePackage:
    """A FileSet of `count` files whose Change Dump closed a package at once (rotation 0)."""
    files = FileSet(root, changelist_rotation=timedelta(seconds=0))
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(count)])
    final = ChangePackage.objects.filter(final=True).order_by("number").first()
    assert final is not None
    return final


def self_lastmod():
    from datetime import UTC, datetime

    return datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def when(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def get(client: Client, path: str, **headers):
    response = client.get(path, headers=headers)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return response.status_code, body, response


def content(n: int, version: int = 1) -> bytes:
    return f"resource {n} version {version}\n".encode() * (n % 5 + 1)


def entries(document: bytes) -> list[etree._Element]:
    return etree.fromstring(document).findall("sm:url", NS)


def check_package(client: Client, entry: etree._Element, capability: str) -> dict[str, bytes]:
    """Fetch one dump entry's package; check it against the entry and its manifest.

    Returns the bitstreams by manifest loc (for a Change Dump: by path).
    """
    loc = entry.find("sm:loc", NS).text
    md = entry.find("rs:md", NS).attrib
    status, package, response = get(client, loc)
    assert status == 200 and response["Content-Type"] == "application/zip"
    assert int(md["length"]) == len(package)
    assert md["type"] == "application/zip"
    digests = dict(item.split(":", 1) for item in md["hash"].split())
    assert digests["md5"] == hashlib.md5(package, usedforsecurity=False).hexdigest()
    assert digests["sha-256"] == hashlib.sha256(package).hexdigest()
    archive = zipfile.ZipFile(io.BytesIO(package))
    manifest = archive.read("manifest.xml")
    assert_valid(manifest)
    assert etree.fromstring(manifest).find("rs:md", NS).get("capability") == capability
    contents = entry.find("rs:ln", NS).attrib
    assert contents["rel"] == "contents"
    served = get(client, contents["href"])[1]
    assert served == manifest, "the served manifest differs from the packaged one"
    reader = (
        ResourceDumpManifest() if capability == "resourcedump-manifest" else ChangeDumpManifest()
    )
    reader.parse(str_data=manifest.decode())
    bitstreams = {}
    for item in reader:
        if item.path is None:
            assert item.change == "deleted"
            continue
        data = archive.read(item.path.lstrip("/"))
        assert len(data) == item.length
        assert hashlib.md5(data, usedforsecurity=False).hexdigest() == item.md5
        assert hashlib.sha256(data).hexdigest() == item.sha256
        bitstreams[item.uri if capability == "resourcedump-manifest" else item.path] = data
    assert sorted(archive.namelist()) == sorted(
        ["manifest.xml", *(item.path.lstrip("/") for item in reader if item.path)]
    )
    return bitstreams


def resource_dump(client: Client) -> dict[str, bytes]:
    """Every bitstream of the Resource Dump by URI, each package checked."""
    status, body, _ = get(client, f"{BASE}/resourcedump.xml")
    assert status == 200
    assert_valid(body)
    root = etree.fromstring(body)
    assert root.find("rs:md", NS).get("capability") == "resourcedump"
    assert root.find("rs:ln[@rel='up']", NS).get("href").endswith(f"{BASE}/capabilitylist.xml")
    ResourceDump().parse(str_data=body.decode())
    found: dict[str, bytes] = {}
    for entry in entries(body):
        found.update(check_package(client, entry, "resourcedump-manifest"))
    return found


def test_resource_dump_packages_every_file_and_validates(client, tmp_path: Path) -> None:
    files = FileSet(tmp_path / "files", entries_per_document=3)
    names = [f"a/r{n}.txt" for n in range(7)] + ["notes/read me.txt"]
    ingest(files.resource_set, [files.write(name, content(n)) for n, name in enumerate(names)])

    dump = resource_dump(client)

    expected = {
        PREFIX + name.replace(" ", "%20"): (files.root / name).read_bytes() for name in names
    }
    assert dump == expected
    assert ResourcePackage.objects.count() == 3  # 8 files at 3 bitstreams a package
    capabilities = get(client, f"{BASE}/capabilitylist.xml")[1]
    listed = [
        md.get("capability") for md in etree.fromstring(capabilities).iterfind(".//rs:md", NS)
    ]
    assert "resourcedump" in listed and "changedump" in listed


def test_a_path_xml_cannot_hold_leaves_only_its_bitstream_out(client, tmp_path: Path) -> None:
    """`…/a%01b.txt` is a fine URI, but its decoded path can be neither a manifest's `path`
    nor a file the portal reads: one such resource failed every dump of its set, for good
    (its change stays logged). Now it is reported and left out, and the dumps go on."""
    files = FileSet(tmp_path / "files")
    odd = dataclasses.replace(
        files.write("a\x01b.txt", b"odd name\n"),
        location_type=LocationType.URL,
        location_value=PREFIX + "a%01b.txt",
        uri=PREFIX + "a%01b.txt",
    )
    report = files.post([files.write("ok.txt", b"fine\n"), odd])

    assert {(s.uri, s.reason) for s in report.dumps.skipped} == {
        (odd.uri, "its path must not contain control characters.")
    }
    assert resource_dump(client) == {PREFIX + "ok.txt": b"fine\n"}
    (entry,) = entries(get(client, f"{BASE}/changedump.xml")[1])
    assert list(check_package(client, entry, "changedump-manifest").values()) == [b"fine\n"]

    files.post([dataclasses.replace(files.delete("a\x01b.txt"), uri=odd.uri)])
    (entry,) = entries(get(client, f"{BASE}/changedump.xml")[1])
    assert list(check_package(client, entry, "changedump-manifest").values()) == [b"fine\n"]


def test_a_lastmod_past_what_zip_can_date_is_packaged(client, tmp_path: Path) -> None:
    """ZIP dates run from 1980 to 2107; a lastmod of 2200 (a fine W3C datetime) failed
    every dump run of its set with a struct.error, for good."""
    files = FileSet(tmp_path / "files")
    late = dataclasses.replace(
        files.write("late.txt", b"late\n"), lastmod=when("2200-01-01T00:00:00Z")
    )
    early = dataclasses.replace(
        files.write("early.txt", b"early\n"), lastmod=when("1900-01-01T00:00:00Z")
    )

    report = files.post([late, early])

    assert report.dumps.skipped == []
    assert resource_dump(client) == {
        PREFIX + "late.txt": b"late\n",
        PREFIX + "early.txt": b"early\n",
    }


def test_one_update_rebuilds_exactly_one_package(tmp_path: Path, client) -> None:
    files = FileSet(tmp_path / "files", entries_per_document=4)
    files.post([files.write(f"r{n:02d}.txt", content(n)) for n in range(12)])
    before = {p.number: p.etag for p in ResourcePackage.objects.all()}
    assert len(before) == 3

    report = files.post([files.write("r05.txt", content(5, version=2), change="updated")])

    assert [name for name in report.dumps.packages_written if name.startswith("resourcedump")] == [
        "resourcedump-package-2.zip"
    ]
    after = {p.number: p.etag for p in ResourcePackage.objects.all()}
    assert [n for n in after if after[n] != before[n]] == [2]
    # The other three came from the old package.
    assert report.dumps.reused["resourcedump-package-2.zip"] == 3
    assert resource_dump(client)[PREFIX + "r05.txt"] == content(5, version=2)

    report = files.post([files.write("r99.txt", content(99))])
    written = [n for n in report.dumps.packages_written if n.startswith("resourcedump")]
    assert written == ["resourcedump-package-4.zip"]  # the full tail is closed, a new one opens


def test_a_run_that_wrote_only_dump_packages_says_so(tmp_path: Path) -> None:
    """It said "rewrote 0 resource list page(s), 0 change list page(s) and no index"."""
    files = FileSet(tmp_path / "files", publish_resource_dump=False, publish_change_dump=False)
    files.post([files.write("a.txt", b"a"), files.write("b.txt", b"b")])
    CapabilitySettings.objects.filter(resource_set=files.resource_set).update(
        publish_resource_dump=True
    )

    report = regenerate(ResourceSet.objects.get(pk=files.resource_set.pk))

    assert report is not None and not report.pages_written
    assert str(report).startswith("wrote 1 dump package(s) (")


@pytest.mark.parametrize("step", ["package", "dump document"])
def test_a_run_that_lost_its_lease_publishes_no_dump(tmp_path: Path, monkeypatch, step) -> None:
    """A run stalled past its lease and taken over wrote over the newer run's dump."""
    from sitemaps.dumps import documents as dump_documents
    from sitemaps.dumps.job import DumpJob

    files = FileSet(tmp_path / "files", entries_per_document=4, publish_change_dump=False)
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(6)])
    rows = {"package": ResourcePackage, "dump document": DumpDocument}[step].objects
    published = list(rows.values_list("storage_name"))
    owner, name = {"package": (DumpJob, "write"), "dump document": (dump_documents, "_store")}[step]
    storing = getattr(owner, name)

    def taken_over_while_storing(*args, **kwargs):
        RegenerationState.objects.filter(resource_set=files.resource_set).update(holder="next")
        return storing(*args, **kwargs)

    monkeypatch.setattr(owner, name, taken_over_while_storing)

    with pytest.raises(LeaseLost):
        files.post([files.write("r1.txt", content(1, version=2), change="updated")])

    assert list(rows.values_list("storage_name")) == published


def test_changes_recorded_before_a_url_prefix_move_are_still_packaged(tmp_path: Path) -> None:
    """Closed windows keep the URIs they were published with; their files are read where
    the resource now points. They were skipped as "not under the set's url_prefix", in
    packages then final: gone from the Change Dump for good."""
    files = FileSet(
        tmp_path / "files",
        publish_change_dump=False,
        publish_resource_dump=False,
        changelist_rotation=timedelta(seconds=0),  # each run closes the open list
    )
    files.post([files.write("a.txt", b"a"), files.write("b.txt", b"b")])
    files.post([files.write("c.txt", b"c")])
    files.resource_set.url_prefix = "http://data.example.org/acme/moved/"
    files.resource_set.save()
    CapabilitySettings.objects.filter(resource_set=files.resource_set).update(
        publish_change_dump=True
    )

    report = regenerate(ResourceSet.objects.get(pk=files.resource_set.pk))

    assert report is not None and report.dumps is not None
    assert report.dumps.skipped == []
    packages = ChangePackage.objects.exclude(storage_name="")
    assert sum(package.entries for package in packages) == 3


def test_a_file_that_differs_from_its_record_is_reported_not_packaged(tmp_path: Path, client):
    files = FileSet(tmp_path / "files")
    events = [files.write(f"r{n}.txt", content(n)) for n in range(4)]
    (files.root / "r1.txt").write_bytes(b"changed behind the portal's back")
    (files.root / "r2.txt").unlink()
    (files.root / "r3.txt").write_bytes(content(3)[::-1])  # same length, other bytes

    report = files.post(events)

    reasons = {(s.uri, s.reason) for s in report.dumps.skipped}
    assert {
        (PREFIX + "r1.txt", "its file has 32 bytes, the record says 42"),
        (PREFIX + "r2.txt", "its file is missing"),
        (
            PREFIX + "r3.txt",
            "its file's md5 differs from the record (changed since its last event?)",
        ),
    } <= reasons
    assert set(resource_dump(client)) == {PREFIX + "r0.txt"}
    package = ResourcePackage.objects.get()
    assert package.skipped_count == 3
    assert {item["uri"] for item in package.skipped} == {PREFIX + f"r{n}.txt" for n in (1, 2, 3)}
    assert DumpState.objects.get().skipped == 6  # in the Resource Dump and the Change Dump


def test_change_dump_follows_the_change_list_windows(client, tmp_path: Path) -> None:
    files = FileSet(tmp_path / "files", changelist_rotation=timedelta(days=1))
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(3)])
    files.post([files.write("r1.txt", content(1, version=2), change="updated")])
    files.post([files.write("r1.txt", content(1, version=3), change="updated")])
    files.post([files.delete("r2.txt")])

    status, body, _ = get(client, f"{BASE}/changedump.xml")
    assert status == 200
    assert_valid(body)
    ChangeDump().parse(str_data=body.decode())
    (entry,) = entries(body)
    assert "until" not in entry.find("rs:md", NS).attrib  # the open window
    bitstreams = check_package(client, entry, "changedump-manifest")
    manifest = ChangeDumpManifest()
    manifest.parse(str_data=get(client, entry.find("rs:ln", NS).get("href"))[1].decode())
    changes = [(item.uri.removeprefix(PREFIX), item.change) for item in manifest]
    assert changes == [
        ("r0.txt", "created"),
        ("r1.txt", "created"),
        ("r2.txt", "created"),
        ("r1.txt", "updated"),
        ("r1.txt", "updated"),
        ("r2.txt", "deleted"),
    ]
    # Each version's bytes survive although the file holds only the last one.
    versions = [bitstreams[item.path] for item in manifest if item.uri == PREFIX + "r1.txt"]
    assert versions == [content(1), content(1, version=2), content(1, version=3)]


def test_a_closed_window_gets_its_package_once(client, tmp_path: Path) -> None:
    files = FileSet(tmp_path / "files", changelist_rotation=timedelta(seconds=0))
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(2)])
    first = ChangePackage.objects.order_by("since").first()
    assert first.final and first.until is not None
    etag = first.etag

    files.post([files.write("r0.txt", content(0, version=2), change="updated")])
    files.post([files.write("r5.txt", content(5))])

    first.refresh_from_db()
    assert first.etag == etag
    body = get(client, f"{BASE}/changedump.xml")[1]
    assert_valid(body)
    windows = [entry.find("rs:md", NS).attrib for entry in entries(body)]
    assert all("until" in md for md in windows[:-1])
    assert [md["from"] for md in windows] == sorted(md["from"] for md in windows)
    for entry in entries(body):
        check_package(client, entry, "changedump-manifest")


def test_package_range_requests_and_conditional_get(client, tmp_path: Path) -> None:
    files = FileSet(tmp_path / "files")
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(5)])
    path = f"{BASE}/resourcedump-package-1.zip"
    status, whole, response = get(client, path)
    assert status == 200 and response["Accept-Ranges"] == "bytes"
    etag, last_modified = response["ETag"], response["Last-Modified"]

    status, part, response = get(client, path, Range="bytes=10-")
    assert status == 206 and part == whole[10:]
    assert response["Content-Range"] == f"bytes 10-{len(whole) - 1}/{len(whole)}"
    assert get(client, path, Range="bytes=-7")[1] == whole[-7:]
    assert get(client, path, Range="bytes=0-3", **{"If-Range": etag})[1] == whole[:4]
    assert get(client, path, Range="bytes=0-3", **{"If-Range": '"stale"'})[0] == 200
    status, _, response = get(client, path, Range=f"bytes={len(whole)}-")
    assert status == 416 and response["Content-Range"] == f"bytes */{len(whole)}"
    assert get(client, path, **{"If-None-Match": etag})[0] == 304
    assert get(client, path, **{"If-Modified-Since": last_modified})[0] == 304
    head = client.head(path)
    assert head.status_code == 200 and int(head["Content-Length"]) == len(whole)


def test_protected_packages_need_a_token(client, tmp_path: Path) -> None:
    files = FileSet(tmp_path / "files", protected=True)
    files.post([files.write("secret.txt", b"secret")])
    _, key = ApiToken.issue(provider=files.resource_set.provider)
    for name in ("resourcedump.xml", "resourcedump-package-1.zip", "resourcedump-manifest-1.xml"):
        assert get(client, f"{BASE}/{name}")[0] == 401
        assert get(client, f"{BASE}/{name}", Authorization=f"Bearer {key}")[0] == 200


def test_dumps_are_404_when_not_published(client, tmp_path: Path) -> None:
    files = FileSet(tmp_path / "files")
    files.post([files.write("a.txt", b"a")])
    CapabilitySettings.objects.filter(resource_set=files.resource_set).update(
        publish_resource_dump=False
    )
    assert get(client, f"{BASE}/resourcedump.xml")[0] == 404
    assert get(client, f"{BASE}/resourcedump-package-1.zip")[0] == 404
    assert get(client, f"{BASE}/changedump.xml")[0] == 200


def admin_add_set(admin_client, root: str, **capabilities):
    """POST the admin's add form for a set with its capability settings inline."""
    provider, _ = DataProvider.objects.get_or_create(slug="acme", defaults={"name": "Acme"})
    data = {
        "provider": provider.pk,
        "slug": "new",
        "name": "New",
        "url_prefix": PREFIX,
        "resource_root_dir": root,
        "capability_settings-TOTAL_FORMS": "1",
        "capability_settings-INITIAL_FORMS": "0",
        "capability_settings-MIN_NUM_FORMS": "1",
        "capability_settings-MAX_NUM_FORMS": "1",
        "capability_settings-0-publish_resource_list": "on",
        "capability_settings-0-publish_change_list": "on",
        "capability_settings-0-entries_per_document": "50000",
        "capability_settings-0-changelist_rotation": "1 00:00:00",
        "capability_settings-0-regenerate_after_changes": "1000",
        "capability_settings-0-regenerate_after_seconds": "1",
    }
    data.update({f"capability_settings-0-{name}": "on" for name in capabilities})
    return admin_client.post(reverse("admin:sources_resourceset_add"), data)


def test_the_admin_refuses_dumps_for_a_set_whose_files_it_cannot_read(admin_client, tmp_path):
    response = admin_add_set(admin_client, "", publish_resource_dump=True)
    assert response.status_code == 200  # the form again, with the reason
    assert (
        "Dumps cannot be published: the set has no resource_root_dir" in response.content.decode()
    )
    assert not ResourceSet.objects.filter(slug="new").exists()

    response = admin_add_set(admin_client, str(tmp_path), publish_change_dump=True)
    assert response.status_code == 302  # saved: the portal can read files under this root
    settings = ResourceSet.objects.get(slug="new").capabilities
    assert settings.publish_change_dump and not settings.publish_resource_dump


def test_regenerate_says_why_a_set_gets_no_dumps(tmp_path: Path) -> None:
    files = FileSet(tmp_path / "files")
    ResourceSet.objects.filter(pk=files.resource_set.pk).update(resource_root_dir="")
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="dumps not built for 1 set"):
        call_command("regenerate", "acme/files", stdout=out, stderr=err)
    assert "acme/files: dumps not built: the set has no resource_root_dir" in err.getvalue()
    assert "resource list" in out.getvalue()  # the lists were still written


def test_url_only_sets_cannot_dump(tmp_path: Path) -> None:
    files = FileSet(tmp_path / "files")
    url = "http://elsewhere.example.org/a.pdf"
    ingest_events(
        resource_set=files.resource_set,
        events=[
            Event(
                change="created",
                location_type=LocationType.URL,
                location_value=url,
                uri=url,
                length=1,
                md5="0" * 32,
                mime="application/pdf",
                lastmod=self_lastmod(),
            )
        ],
    )
    report = regenerate(files.resource_set)
    assert "every resource of the set has a url location" in report.dumps.problem
    assert DumpState.objects.get().problem == report.dumps.problem


def test_the_set_page_shows_packages_and_what_could_not_be_packaged(admin_client, tmp_path):
    files = FileSet(tmp_path / "files")
    events = [files.write(f"r{n}.txt", content(n)) for n in range(3)]
    (files.root / "r2.txt").unlink()
    files.post(events)
    page = admin_client.get(
        reverse("admin:sources_resourceset_change", args=[files.resource_set.pk])
    )
    html = page.content.decode()
    assert "resourcedump-package-1.zip (2 bitstreams" in html
    assert "changedump-package-1.zip (2 bitstreams" in html
    assert "Not packaged now: 2" in html
    # Once per dump, each line saying which: the same URI twice read as a duplicate.
    for package in ("resourcedump-package-1.zip", "changedump-package-1.zip"):
        assert f"<li>{package}: {PREFIX}r2.txt: its file is missing</li>" in html
    assert "Last dump run: " in html and "2 not packaged" in html


def test_versions_replaced_before_the_change_dump_took_them_are_no_fault_to_mend(
    admin_client, tmp_path
):
    """The demo's case: a Change Dump turned on for a set with history finds the bytes of
    every version but the last replaced or deleted. The set's page tells those apart from
    a file out of step with its latest record, which still needs mending."""
    files = FileSet(tmp_path / "files", publish_resource_dump=False, publish_change_dump=False)
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(3)])
    files.post([files.write("r0.txt", content(0, 2), change="updated"), files.delete("r1.txt")])
    (files.root / "r2.txt").write_bytes(b"changed, and no event posted\n")
    CapabilitySettings.objects.filter(resource_set=files.resource_set).update(
        publish_change_dump=True
    )
    report = regenerate(ResourceSet.objects.get(pk=files.resource_set.pk))
    assert "1 resource(s) not packaged, 2 earlier version(s)" in str(report.dumps)

    page = admin_client.get(
        reverse("admin:sources_resourceset_change", args=[files.resource_set.pk])
    )
    html = page.content.decode()
    assert "Not packaged now: 1 " in html
    assert f"{PREFIX}r2.txt: its file has 29 bytes" in html
    assert f"{PREFIX}r0.txt" not in html and f"{PREFIX}r1.txt" not in html
    assert "Earlier versions not in the Change Dump: 2 " in html
    assert "2 not packaged" not in html  # the last run's count is the faults' alone


def test_many_packages_make_a_resource_dump_index(client, settings, tmp_path: Path) -> None:
    files = FileSet(tmp_path / "files", entries_per_document=2)
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(5)])  # 3 packages, 2 a dump

    body = get(client, f"{BASE}/resourcedump.xml")[1]
    root = assert_valid(body)
    assert root.tag == f"{{{NS['sm']}}}sitemapindex"
    assert root.find("rs:md", NS).get("capability") == "resourcedump"
    parts = [loc.text for loc in root.iterfind("sm:sitemap/sm:loc", NS)]
    assert parts == [f"{settings.PUBLIC_BASE_URL}{BASE}/resourcedump-{n}.xml" for n in (1, 2)]
    found = {}
    for part in parts:
        document = get(client, part)[1]
        assert_valid(document)
        assert etree.fromstring(document).find("rs:ln[@rel='index']", NS).get("href") == (
            f"{settings.PUBLIC_BASE_URL}{BASE}/resourcedump.xml"
        )
        for entry in entries(document):
            found.update(check_package(client, entry, "resourcedump-manifest"))
    assert len(found) == 5


def test_a_window_too_large_for_one_package_gets_several(client, settings, tmp_path: Path):
    settings.RESOURCESYNC_DUMP_PACKAGE_BYTES = 4000
    files = FileSet(tmp_path / "files")
    for n in range(6):  # one instant per post: packages close between instants
        files.post([files.write(f"r{n}.txt", b"%d" % n * 900)])

    body = get(client, f"{BASE}/changedump.xml")[1]
    assert_valid(body)
    windows = [entry.find("rs:md", NS).attrib for entry in entries(body)]
    assert len(windows) >= 3
    assert all("until" in md for md in windows[:-1]) and "until" not in windows[-1]
    for earlier, later in itertools.pairwise(windows):
        assert when(earlier["until"]) < when(later["from"])
    packaged = {}
    for entry in entries(body):
        packaged.update(check_package(client, entry, "changedump-manifest"))
    assert sorted(packaged.values()) == sorted(b"%d" % n * 900 for n in range(6))
    assert sum(1 for p in ChangePackage.objects.all() if p.final) == len(windows) - 1


def test_superseded_packages_are_cleaned_up_after_the_grace_period(tmp_path: Path) -> None:
    from django.utils import timezone

    from sitemaps.cleanup import remove_unreferenced
    from sitemaps.storage import document_storage

    files = FileSet(tmp_path / "files")
    files.post([files.write("a.txt", b"a")])
    old = ResourcePackage.objects.get()
    files.post([files.write("a.txt", b"a2", change="updated")])
    new = ResourcePackage.objects.get()
    assert new.storage_name != old.storage_name
    storage = document_storage()
    (Path(storage.location) / "acme/files/.package-killed.partial").write_bytes(b"PK")

    removed = remove_unreferenced(now=timezone.now() + timedelta(hours=1))

    assert {old.storage_name, old.manifest_name, "acme/files/.package-killed.partial"} <= set(
        removed
    )
    current = [new.storage_name, new.manifest_name, new.manifest_name + ".gz"]
    assert all(storage.exists(name) for name in current)
    for package in ChangePackage.objects.all():
        assert storage.exists(package.storage_name) and storage.exists(package.manifest_name)


def test_lists_split_inside_one_instant_make_one_change_dump_window(client, tmp_path: Path):
    """More changes at one instant than a Change List holds split the lists inside it;
    the Change Dump packages each of those changes once, in one window."""
    files = FileSet(tmp_path / "files", entries_per_document=3)
    moment = timezone.now()
    events = [files.write(f"r{n}.txt", content(n)) for n in range(7)]
    files.post([dataclasses.replace(event, datetime=moment) for event in events])
    files.post([files.write("later.txt", content(7))])

    body = get(client, f"{BASE}/changedump.xml")[1]
    assert_valid(body)
    packaged: list[bytes] = []
    for entry in entries(body):
        packaged += check_package(client, entry, "changedump-manifest").values()
    assert sorted(packaged) == sorted(content(n) for n in range(8))  # each change once
    assert ChangePackage.objects.filter(until_key__isnull=False).exists()


def change_dump_parts(client: Client) -> dict[str, tuple[dict, bytes]]:
    """The served Change Dump Index's parts by URL: their index entry's `rs:md` and body.

    Each part is checked against its entry: `from` and `until` agree (a closed
    part says `until` in both, an open one in neither).
    """
    index = assert_valid(get(client, f"{BASE}/changedump.xml")[1])
    assert index.tag == f"{{{NS['sm']}}}sitemapindex"
    parts = {}
    for entry in index.iterfind("sm:sitemap", NS):
        url = entry.find("sm:loc", NS).text
        listed = dict(entry.find("rs:md", NS).attrib)
        body = get(client, url)[1]
        own = dict(assert_valid(body).find("rs:md", NS).attrib)
        assert {k: listed.get(k) for k in ("from", "until")} == {
            k: own.get(k) for k in ("from", "until")
        }, url
        parts[url] = (listed, body)
    return parts


def test_change_dump_parts_agree_with_their_index_and_stay_closed(client, tmp_path: Path):
    """A rotation with no change since closes the last package's window, not the last
    part: it stays open in the index and in itself, for the windows to come. A part said
    closed keeps its `until` and its packages."""
    files = FileSet(
        tmp_path / "files", entries_per_document=2, changelist_rotation=timedelta(seconds=0)
    )
    closed: dict[str, tuple[str, bytes]] = {}

    def check() -> None:
        parts = change_dump_parts(client)
        for url, (listed, body) in parts.items():
            if url in closed:
                assert (listed.get("until"), body) == closed[url], f"{url} changed once closed"
            elif "until" in listed:
                closed[url] = (listed["until"], body)
        *earlier, (newest, _) = parts.values()
        assert all("until" in listed for listed, _ in earlier)
        assert "until" not in newest  # it stands for the windows to come
        for _, body in parts.values():
            for entry in entries(body):
                check_package(client, entry, "changedump-manifest")

    for n in range(3):  # one window each: 3 packages, 2 parts
        files.post([files.write(f"r{n}.txt", content(n))])
    check()
    for n in range(3, 6):
        call_command("regenerate", "acme/files")  # a rotation with nothing new
        check()
        files.post([files.write(f"r{n}.txt", content(n))])
        check()
    assert len(closed) >= 2


def every_manifest_written(published_dir: Path) -> list[bytes]:
    """Each package's stored `manifest.xml` copy, and each one in the published tree."""
    storage = document_storage()
    stored = [
        storage.open(package.manifest_name).read()
        for model in (ResourcePackage, ChangePackage)
        for package in model.objects.exclude(manifest_name="")
    ]
    return stored + [path.read_bytes() for path in published_dir.rglob("*-manifest-*.xml")]


def test_a_window_of_changes_none_packaged_gets_no_package(
    client, published_dir: Path, tmp_path: Path
) -> None:
    """One request updates a file 20 times: only the last version's bytes are still on
    disk. The packages of the earlier versions would hold nothing: there are none, no
    empty manifest (no valid Sitemap has no <url>); their versions are counted as
    replaced by later changes, not as faults."""
    files = FileSet(tmp_path / "files", entries_per_document=5)
    versions = [files.write("r0.txt", content(0, version=1))]
    versions += [files.write("r0.txt", content(0, v), change="updated") for v in range(2, 21)]

    report = files.post(versions)

    for manifest in every_manifest_written(published_dir):
        assert_valid(manifest)
    assert (report.dumps.skipped, report.dumps.superseded) == ([], 19)
    body = get(client, f"{BASE}/changedump.xml")[1]
    assert_valid(body)
    (entry,) = entries(body)  # the package of version 20
    assert list(check_package(client, entry, "changedump-manifest").values()) == [
        content(0, version=20)
    ]
    empty = ChangePackage.objects.filter(storage_name="")
    assert empty.count() == 3 and sum(p.superseded_count for p in empty) == 15
    for package in empty:
        assert client.get(f"{BASE}/changedump-manifest-{package.number}.xml").status_code == 404
        assert client.get(f"{BASE}/changedump-package-{package.number}.zip").status_code == 404


def test_a_resource_dump_package_none_of_whose_files_match_is_not_listed(
    client, published_dir: Path, tmp_path: Path
) -> None:
    files = FileSet(tmp_path / "files", entries_per_document=2)
    events = [files.write(f"r{n}.txt", content(n)) for n in range(4)]
    for n in (2, 3):
        (files.root / f"r{n}.txt").write_bytes(b"changed behind the portal's back")

    files.post(events)

    assert set(resource_dump(client)) == {PREFIX + "r0.txt", PREFIX + "r1.txt"}
    for manifest in every_manifest_written(published_dir):
        assert_valid(manifest)


def packaged_changes(client: Client) -> list[tuple[str, str]]:
    """(loc, datetime) of every change in the Change Dump's manifests (one window)."""
    packages = entries(get(client, f"{BASE}/changedump.xml")[1])
    manifests = [get(client, entry.find("rs:ln", NS).get("href"))[1] for entry in packages]
    return [
        (entry.findtext("sm:loc", namespaces=NS), entry.find("rs:md", NS).get("datetime"))
        for manifest in manifests
        for entry in entries(manifest)
    ]


def test_a_change_dump_packages_nothing_behind_a_change_waiting_for_the_copy(
    use_elasticsearch, client, tmp_path: Path
) -> None:
    """The copy took a later request's changes first: packaged, they put the earlier
    request's behind where a destination resumes (the newest datetime it applied)."""
    mirror = use_elasticsearch.mirror
    files = FileSet(tmp_path / "files", changelist_rotation=timedelta(days=1))
    changes = files.resource_set.changes.values_list("pk", flat=True)
    ingest_events(resource_set=files.resource_set, events=[files.write("late.txt", content(1))])
    waiting = list(changes)
    ingest_events(resource_set=files.resource_set, events=[files.write("seen.txt", content(2))])
    mirror.index_changes(list(changes.exclude(pk__in=waiting)))
    regenerate(files.resource_set)
    first = packaged_changes(client)
    passed = max((datetime for _, datetime in first), default="")

    mirror.index_changes(waiting)
    regenerate(files.resource_set)

    later = [entry for entry in packaged_changes(client) if entry not in first]
    assert len(first) + len(later) == 2
    assert all(datetime > passed for _, datetime in later)


# --- A run that fails partway: what is served stays consistent ------------------------


def from_django(client: Client) -> Callable[[str], tuple[int, bytes]]:
    """GET through Django's views: (status, body)."""

    def fetch(url: str) -> tuple[int, bytes]:
        status, body, _ = get(client, urlsplit(url).path)
        return status, body

    return fetch


def from_tree(published_dir: Path) -> Callable[[str], tuple[int, bytes]]:
    """GET as nginx answers from the published tree (`final/` first): (status, body)."""

    def fetch(url: str) -> tuple[int, bytes]:
        folder, name = published_dir / BASE.lstrip("/"), urlsplit(url).path.rsplit("/", 1)[1]
        for path in (folder / "final" / name, folder / name):
            if path.exists():
                return 200, path.read_bytes()
        return 404, b""

    return fetch


def assert_served_as_listed(fetch: Callable[[str], tuple[int, bytes]], dump: str) -> set[str]:
    """The served dump (and each part its index lists) lists packages each served with
    exactly the length and hashes listed, and its manifest; no part it does not list is
    served. Returns the names of the packages listed."""
    status, top = fetch(f"{BASE}/{dump}.xml")
    assert status == 200
    root = etree.fromstring(top)
    parts = [loc.text for loc in root.iterfind("sm:sitemap/sm:loc", NS)]
    documents = [fetch(part) for part in parts] if parts else [(200, top)]
    assert [status for status, _ in documents] == [200] * len(documents), parts
    listed = {urlsplit(part).path.rsplit("/", 1)[1] for part in parts}
    for n in range(1, 6):
        if f"{dump}-{n}.xml" not in listed:
            assert fetch(f"{BASE}/{dump}-{n}.xml")[0] == 404, f"{dump}-{n}.xml served, not listed"
    packages = set()
    for _, document in documents:
        for entry in entries(document):
            loc, md = entry.find("sm:loc", NS).text, entry.find("rs:md", NS).attrib
            status, package = fetch(loc)
            assert status == 200, f"{loc} listed, answers {status}"
            digests = dict(item.split(":", 1) for item in md["hash"].split())
            assert (int(md["length"]), digests["md5"], digests["sha-256"]) == (
                len(package),
                hashlib.md5(package, usedforsecurity=False).hexdigest(),
                hashlib.sha256(package).hexdigest(),
            ), f"{loc} is served otherwise than listed"
            manifest = zipfile.ZipFile(io.BytesIO(package)).read("manifest.xml")
            assert fetch(entry.find("rs:ln", NS).get("href")) == (200, manifest)
            packages.add(urlsplit(loc).path.rsplit("/", 1)[1])
    return packages


def assert_consistent(client: Client, published_dir: Path, dump: str) -> set[str]:
    """`assert_served_as_listed` through Django and through the published tree alike."""
    listed = assert_served_as_listed(from_django(client), dump)
    assert assert_served_as_listed(from_tree(published_dir), dump) == listed
    return listed


def full_disk_for(monkeypatch, match: Callable[[str], bool]) -> None:
    """Document writes (`save_document`'s) whose file name `match`es fail: ENOSPC."""
    from sitemaps import storage

    writing = storage._write_local

    def full(target_storage, path: Path, data: bytes) -> None:
        if match(path.name):
            raise OSError(errno.ENOSPC, "No space left on device")
        writing(target_storage, path, data)

    monkeypatch.setattr(storage, "_write_local", full)


def dump_document_name(dump: str) -> Callable[[str], bool]:
    """`<dump>.<etag>.xml` or a part's `<dump>-<n>.<etag>.xml` (not a manifest)."""
    return re.compile(rf"{dump}(?:-[0-9]+)?\.[0-9a-f]{{32}}\.xml(?:\.gz)?").fullmatch


def fail_on_call(monkeypatch, owner, name: str, call: int, error: Exception) -> None:
    """`owner.name` raises `error` on its `call`-th call (1-based), else runs."""
    original, calls = getattr(owner, name), itertools.count(1)

    def failing(*args, **kwargs):
        if next(calls) == call:
            raise error
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, failing)


def fail_for_dump_documents(monkeypatch, name: str) -> None:
    """`publishing.<name>(resource_set, document)` fails for a dump document (EIO)."""
    from sitemaps import publishing

    original = getattr(publishing, name)

    def failing(resource_set, document, *args, **kwargs):
        if isinstance(document, DumpDocument):
            raise OSError(errno.EIO, "Input/output error")
        return original(resource_set, document, *args, **kwargs)

    monkeypatch.setattr(publishing, name, failing)


@pytest.mark.parametrize("step", ["dump document write", "dump document link", "second package"])
def test_a_run_failing_before_its_dump_is_written_switches_no_package(
    backend, client, published_dir: Path, tmp_path: Path, monkeypatch, step
) -> None:
    """Each rebuilt package was switched (row and link) as soon as it was stored, the dump
    rewritten at the end: a failure in between left the dump listing the previous
    package's length and hashes while its URL served the new one."""
    from sitemaps.dumps import storage as package_storage

    files = FileSet(tmp_path / "files", entries_per_document=3, publish_change_dump=False)
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(9)])  # 3 packages
    before = assert_consistent(client, published_dir, "resourcedump")
    if step == "dump document write":
        full_disk_for(monkeypatch, dump_document_name("resourcedump"))
    elif step == "dump document link":
        fail_for_dump_documents(monkeypatch, "publish")
    else:
        full = OSError(errno.ENOSPC, "No space left on device")
        fail_on_call(monkeypatch, package_storage, "_place_local", 2, full)

    with pytest.raises(OSError):
        files.post(  # packages 1 and 3 rebuilt
            [
                files.write("r1.txt", content(1, version=2), change="updated"),
                files.write("r7.txt", content(7, version=2), change="updated"),
            ]
        )

    assert assert_consistent(client, published_dir, "resourcedump") == before
    monkeypatch.undo()
    regenerate(files.resource_set)  # the disk has room again
    assert assert_consistent(client, published_dir, "resourcedump") == before
    assert resource_dump(client)[PREFIX + "r7.txt"] == content(7, version=2)


def test_a_change_dump_failing_before_its_dump_is_written_switches_no_package(
    backend, client, published_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """The open window's package was switched before `changedump.xml` was rewritten."""
    files = FileSet(tmp_path / "files", publish_resource_dump=False)
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(3)])
    before = assert_consistent(client, published_dir, "changedump")
    full_disk_for(monkeypatch, dump_document_name("changedump"))

    with pytest.raises(OSError):
        files.post([files.write("r1.txt", content(1, version=2), change="updated")])

    assert assert_consistent(client, published_dir, "changedump") == before
    monkeypatch.undo()
    regenerate(files.resource_set)
    assert assert_consistent(client, published_dir, "changedump") == before
    (entry,) = entries(get(client, f"{BASE}/changedump.xml")[1])
    assert content(1, version=2) in check_package(client, entry, "changedump-manifest").values()


def test_a_package_merged_away_is_served_until_the_dump_drops_it(
    backend, client, published_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """An emptied package was withdrawn (404) as it merged into the next, before the dump
    was rewritten: a failure in between left the dump listing a URL that answers 404."""
    files = FileSet(tmp_path / "files", entries_per_document=3, publish_change_dump=False)
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(9)])  # 3 packages
    before = assert_consistent(client, published_dir, "resourcedump")
    full_disk_for(monkeypatch, dump_document_name("resourcedump"))

    with pytest.raises(OSError):
        files.post([files.delete(f"r{n}.txt") for n in (3, 4, 5)])  # package 2 empties

    assert assert_consistent(client, published_dir, "resourcedump") == before
    monkeypatch.undo()
    regenerate(files.resource_set)
    after = assert_consistent(client, published_dir, "resourcedump")
    assert after == before - {"resourcedump-package-2.zip"}
    assert get(client, f"{BASE}/resourcedump-package-2.zip")[0] == 404
    assert from_tree(published_dir)(f"{BASE}/resourcedump-package-2.zip")[0] == 404


def test_change_dump_packages_left_over_are_served_until_the_dump_drops_them(
    backend, client, published_dir: Path, tmp_path: Path, monkeypatch, settings
) -> None:
    """A full rebuild that needs fewer packages for a window removed the rest before
    `changedump.xml` was rewritten: a failure in between left it listing URLs that 404."""
    settings.RESOURCESYNC_DUMP_PACKAGE_BYTES = 4000
    files = FileSet(tmp_path / "files", publish_resource_dump=False)
    for n in range(6):  # one instant per post: packages close between instants
        files.post([files.write(f"r{n}.txt", b"%d" % n * 900)])
    before = assert_consistent(client, published_dir, "changedump")
    assert len(before) >= 3
    settings.RESOURCESYNC_DUMP_PACKAGE_BYTES = 1_000_000  # one package holds the window
    full_disk_for(monkeypatch, dump_document_name("changedump"))

    with pytest.raises(OSError):
        regenerate(files.resource_set, full=True)

    assert assert_consistent(client, published_dir, "changedump") == before
    monkeypatch.undo()
    regenerate(files.resource_set, full=True)
    after = assert_consistent(client, published_dir, "changedump")
    assert len(after) == 1
    for gone in before - after:
        assert get(client, f"{BASE}/{gone}")[0] == 404
        assert from_tree(published_dir)(f"{BASE}/{gone}")[0] == 404


@pytest.mark.parametrize("failing", ["link", "row"])
def test_a_dump_shrinking_to_one_document_serves_no_stale_part(
    backend, client, published_dir: Path, tmp_path: Path, monkeypatch, failing
) -> None:
    """A dump index whose parts are no longer needed was rewritten as a plain dump before
    the parts were withdrawn: a failure in between left a part served, listing packages
    merged away, until a later run rewrote the dump again."""
    files = FileSet(tmp_path / "files", entries_per_document=2, publish_change_dump=False)
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(6)])  # 3 packages, 2 parts
    assert etree.fromstring(get(client, f"{BASE}/resourcedump.xml")[1]).tag.endswith("index")
    if failing == "link":
        fail_for_dump_documents(monkeypatch, "withdraw")
    else:
        fail_on_call(monkeypatch, DumpDocument, "delete", 1, DatabaseError("disk I/O error"))

    with pytest.raises((OSError, DatabaseError)):
        files.post([files.delete(f"r{n}.txt") for n in range(2, 6)])  # one package left

    assert_consistent(client, published_dir, "resourcedump")
    monkeypatch.undo()
    regenerate(files.resource_set)
    assert assert_consistent(client, published_dir, "resourcedump") == {
        "resourcedump-package-1.zip"
    }
    assert not etree.fromstring(get(client, f"{BASE}/resourcedump.xml")[1]).tag.endswith("index")


def test_the_run_after_one_killed_while_it_switched_puts_the_tree_back(
    backend, client, published_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """A run killed inside its switch leaves the rows as they were (the transaction never
    commits) but some links already moved; the next run, even with nothing to rebuild,
    puts the published tree back on the rows."""
    from sitemaps.dumps import switch

    files = FileSet(tmp_path / "files", entries_per_document=3, publish_change_dump=False)
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(9)])
    before = assert_consistent(client, published_dir, "resourcedump")
    fail_for_dump_documents(monkeypatch, "publish")  # the packages are linked by then
    monkeypatch.setattr(switch, "_restore_links", lambda resource_set: None)  # killed

    with pytest.raises(OSError):
        regenerate(files.resource_set, full=True)

    with pytest.raises(AssertionError, match="served otherwise than listed"):
        assert_served_as_listed(from_tree(published_dir), "resourcedump")
    monkeypatch.undo()
    regenerate(files.resource_set)
    assert assert_consistent(client, published_dir, "resourcedump") == before


def test_a_cleanup_during_a_long_run_keeps_what_the_run_will_switch_to(
    client, published_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """A run switches its packages at its end, which may come after the grace period:
    a cleanup sweep meanwhile must not delete the versions it stored and will serve."""
    from sitemaps.cleanup import remove_unreferenced
    from sitemaps.dumps.switch import DumpSwitch

    files = FileSet(tmp_path / "files", entries_per_document=3)
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(9)])
    switching = DumpSwitch.apply

    def after_a_long_run(switch: DumpSwitch) -> None:
        later = timezone.now() + timedelta(hours=1)  # every file is older than the grace
        assert remove_unreferenced(now=later)  # it did remove something: the old lists
        switching(switch)

    monkeypatch.setattr(DumpSwitch, "apply", after_a_long_run)
    files.post([files.write("r1.txt", content(1, version=2), change="updated")])

    assert_consistent(client, published_dir, "resourcedump")
    assert_consistent(client, published_dir, "changedump")
    assert resource_dump(client)[PREFIX + "r1.txt"] == content(1, version=2)


def test_a_fifo_where_a_file_was_is_reported_not_waited_on(tmp_path: Path, client) -> None:
    """Opening a FIFO to read waits for a writer: a run that did held its set forever."""
    files = FileSet(tmp_path / "files")
    events = [files.write(f"r{n}.txt", content(n)) for n in range(2)]
    fifo = files.root / "r1.txt"
    fifo.unlink()
    os.mkfifo(fifo)
    unblocked = threading.Event()

    def writer_after_a_while() -> None:
        # On a run that waits, be the writer each open waits for (then it reads nothing).
        if done.wait(5):
            return
        unblocked.set()
        while not done.wait(0.1):
            with contextlib.suppress(OSError):  # ENXIO: no reader waits right now
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    done = threading.Event()
    watchdog = threading.Thread(target=writer_after_a_while, daemon=True)
    watchdog.start()
    try:
        report = files.post(events)
    finally:
        done.set()
        watchdog.join()

    assert not unblocked.is_set(), "the run waited on the FIFO until a writer came"
    reasons = {(s.uri, s.reason) for s in report.dumps.skipped}
    assert (PREFIX + "r1.txt", "it is not a regular file") in reasons
    assert set(resource_dump(client)) == {PREFIX + "r0.txt"}
