"""The harvester against a source written by the `resync` reference library.

Every document, resource and dump package here is produced with resync and
served over real HTTP by a ThreadingHTTPServer on 127.0.0.1, so the harvester
is tested against an independent implementation of the spec.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import socket
import threading
import zipfile
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from resync import CapabilityList, ChangeList, Resource, ResourceList
from resync.change_dump import ChangeDump
from resync.change_dump_manifest import ChangeDumpManifest
from resync.dump import Dump
from resync.list_base import ListBase
from resync.mapper import Mapper
from resync.resource_dump import ResourceDump
from resync.resource_dump_manifest import ResourceDumpManifest

from harvester.config import HarvestConfig, config_from_mapping
from harvester.report import SyncReport
from harvester.state import load_state
from harvester.sync import Mode, run_harvest
from harvester.tasks import harvest
from harvester.walk import HarvestError

# Every harvest is recorded in the portal's journal.
pytestmark = pytest.mark.django_db

AT = "2024-01-01T00:00:00Z"
NOW = dt.datetime(2024, 1, 5, tzinfo=dt.UTC)


def utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


class Source:
    """A static site on 127.0.0.1 with knobs: planned failures, a token, a request log."""

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port
        self.requests: list[str] = []
        self.planned_errors: dict[str, list[int]] = {}
        self.token: str | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def put(self, path: str, content: bytes) -> Path:
        file = self.root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(content)
        return file

    def resource(self, path: str, content: bytes, **attributes: Any) -> Resource:
        """Serve `content` at `path` and describe it as resync does."""
        self.put(path, content)
        return described(self.url(path), content, **attributes)

    def publish(self, path: str, xml: str) -> str:
        self.put(path, xml.encode("utf-8"))
        return self.url(path)

    def capability_list(self, **documents: str) -> None:
        capabilities = CapabilityList()
        capabilities.up = self.url(".well-known/resourcesync")
        for name, url in documents.items():
            capabilities.add_capability(uri=url, name=name)
        self.publish("capabilitylist.xml", capabilities.as_xml())

    def requested(self, prefix: str) -> list[str]:
        return [path for path in self.requests if path.startswith("/" + prefix)]


class _Handler(SimpleHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        source = self.server.source
        source.requests.append(self.path)
        if source.token and self.headers.get("Authorization") != f"Bearer {source.token}":
            self.send_error(401)
            return
        planned = source.planned_errors.get(self.path.lstrip("/"))
        if planned:
            self.send_error(planned.pop(0))
            return
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""


class _Server(ThreadingHTTPServer):
    source: Source


@pytest.fixture
def source(tmp_path: Path) -> Iterator[Source]:
    root = tmp_path / "site"
    root.mkdir()
    server = _Server(("127.0.0.1", 0), partial(_Handler, directory=str(root)))
    server.source = Source(root, server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield server.source
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def destination(tmp_path: Path) -> Path:
    return tmp_path / "mirror"


def described(uri: str, content: bytes, **attributes: Any) -> Resource:
    attributes.setdefault("lastmod", AT)
    return Resource(
        uri=uri,
        length=len(content),
        md5=hashlib.md5(content, usedforsecurity=False).hexdigest(),
        sha256=hashlib.sha256(content).hexdigest(),
        **attributes,
    )


def make_config(source: Source, destination: Path, **overrides: Any) -> HarvestConfig:
    settings = {
        "capability_list_url": source.url("capabilitylist.xml"),
        "destination": str(destination),
        "retries": 2,
        "backoff": 0.001,
        "timeout": 5,
        **overrides,
    }
    return config_from_mapping(settings, base_dir=destination.parent)


def copy_of(source: Source, destination: Path, path: str) -> Path:
    return destination / f"127.0.0.1_{source.port}" / path


def resource_list(source: Source, resources: list[Resource], at: str = AT) -> str:
    listing = ResourceList()
    listing.md_at = at
    listing.up = source.url("capabilitylist.xml")
    listing.add(resources)
    return source.publish("resourcelist.xml", listing.as_xml())


def change_list(
    source: Source, name: str, changes: list[Resource], since: str, until: str | None = None
) -> str:
    listing = ChangeList()
    listing.md_from = since
    if until:
        listing.md_until = until
    listing.up = source.url("capabilitylist.xml")
    listing.add(changes)
    return source.publish(name, listing.as_xml())


def baseline(
    source: Source, destination: Path, files: dict[str, bytes], **overrides: Any
) -> SyncReport:
    """Publish `files` in a Resource List and harvest them."""
    resources = [source.resource(path, content) for path, content in files.items()]
    source.capability_list(resourcelist=resource_list(source, resources))
    return run_harvest(make_config(source, destination, **overrides), Mode.BASELINE, now=NOW)


# --- Baseline -----------------------------------------------------------------


def test_baseline_from_resource_list(source: Source, destination: Path) -> None:
    files = {"res/a.txt": b"alpha", "res/deep/b.txt": b"bravo"}
    source.put("res/c d.txt", b"charlie")
    resources = [source.resource(path, content) for path, content in files.items()]
    resources.append(described(source.url("res/c%20d.txt"), b"charlie"))
    source.capability_list(resourcelist=resource_list(source, resources))

    report = run_harvest(make_config(source, destination), Mode.BASELINE)

    assert (report.downloaded, report.failed) == (3, 0)
    assert report.bytes == len(b"alpha" + b"bravo" + b"charlie")
    assert copy_of(source, destination, "res/a.txt").read_bytes() == b"alpha"
    assert copy_of(source, destination, "res/deep/b.txt").read_bytes() == b"bravo"
    assert copy_of(source, destination, "res/c d.txt").read_bytes() == b"charlie"
    state = load_state(destination, source.url("capabilitylist.xml"))
    assert state.synced_until == utc(AT)
    assert set(state.resources) == {resource.uri for resource in resources}


def test_baseline_from_resource_list_index(source: Source, destination: Path) -> None:
    resources = [source.resource(f"res/{n}.txt", f"item {n}".encode()) for n in range(5)]
    listing = ResourceList(mapper=Mapper([source.url(""), str(source.root)]))
    listing.md_at = AT
    listing.up = source.url("capabilitylist.xml")
    listing.add(resources)
    listing.max_sitemap_entries = 2
    listing.write(basename=str(source.root / "resourcelist.xml"))
    source.capability_list(resourcelist=source.url("resourcelist.xml"))

    report = run_harvest(make_config(source, destination), Mode.BASELINE)

    assert b"<sitemapindex" in (source.root / "resourcelist.xml").read_bytes()
    assert len(source.requested("resourcelist0")) == 3
    assert (report.downloaded, report.failed) == (5, 0)
    for n in range(5):
        assert copy_of(source, destination, f"res/{n}.txt").read_bytes() == f"item {n}".encode()


def dump_document(source: Source, packages: list[str]) -> str:
    """A Resource Dump listing the given ZIP packages, as XML."""
    document = ResourceDump()
    document.md_at = AT
    document.up = source.url("capabilitylist.xml")
    for name in packages:
        package = (source.root / name).read_bytes()
        document.add(described(source.url(name), package, mime_type="application/zip"))
    return document.as_xml()


@pytest.mark.parametrize("as_index", [False, True], ids=["plain", "index"])
def test_baseline_prefers_the_resource_dump(
    source: Source, destination: Path, as_index: bool
) -> None:
    files = {"res/a.txt": b"alpha", "res/b.txt": b"bravo", "res/sub/c.txt": b"charlie"}
    contents = ResourceList()
    for path, content in files.items():
        contents.add(described(source.url(path), content, path=str(source.put(path, content))))
    dump = Dump(resources=contents)
    dump.max_files = 2
    assert dump.write(basename=str(source.root / "dump")) == 2
    packages = ["dump00000.zip", "dump00001.zip"]
    if as_index:
        index = ListBase(capability_name="resourcedump")
        index.sitemapindex = True
        index.md_at = AT
        for number, package in enumerate(packages):
            part = source.publish(f"resourcedump{number}.xml", dump_document(source, [package]))
            index.add(Resource(uri=part, md_at=AT))
        dump_url = source.publish("resourcedump.xml", index.as_xml())
    else:
        dump_url = source.publish("resourcedump.xml", dump_document(source, packages))
    source.capability_list(resourcelist=resource_list(source, []), resourcedump=dump_url)
    for path in files:
        (source.root / path).unlink()  # only the packages can provide them now

    report = run_harvest(make_config(source, destination), Mode.BASELINE)

    assert (report.downloaded, report.failed) == (3, 0)
    assert len(source.requested("resourcedump")) == (3 if as_index else 1)
    assert len(source.requested("dump0")) == 2
    assert source.requested("res/") == []
    for path, content in files.items():
        assert copy_of(source, destination, path).read_bytes() == content
    assert [p.name for p in destination.iterdir() if p.name.startswith(".resourcesync-work")] == []


def test_second_baseline_skips_copies_that_are_current(source: Source, destination: Path) -> None:
    baseline(source, destination, {"res/a.txt": b"alpha", "res/b.txt": b"bravo"})
    source.requests.clear()

    report = run_harvest(make_config(source, destination), Mode.BASELINE)

    assert (report.downloaded, report.skipped, report.failed) == (0, 2, 0)
    assert source.requested("res/") == []


def test_dry_run_writes_nothing(source: Source, destination: Path) -> None:
    resources = [source.resource("res/a.txt", b"alpha")]
    source.capability_list(resourcelist=resource_list(source, resources))

    report = run_harvest(make_config(source, destination), Mode.BASELINE, dry_run=True)

    assert (report.downloaded, report.failed, report.dry_run) == (1, 0, True)
    assert not destination.exists()
    assert source.requested("res/") == []


# --- Incremental ----------------------------------------------------------------


def test_incremental_from_change_list_applies_latest_change_within_range(
    source: Source, destination: Path
) -> None:
    baseline(source, destination, {"a": b"a v1", "b": b"b v1", "c": b"c v1", "d": b"d v1"})
    source.put("a", b"a v3")
    (source.root / "b").unlink()
    changes = [
        Resource(uri=source.url("c"), change="deleted", datetime="2024-01-01T06:00:00Z"),
        described(source.url("a"), b"a v2", change="updated", datetime="2024-01-02T00:00:00Z"),
        source.resource("e", b"e v1", change="created", datetime="2024-01-02T10:00:00Z"),
        Resource(uri=source.url("b"), change="deleted", datetime="2024-01-02T11:00:00Z"),
        described(source.url("a"), b"a v3", change="updated", datetime="2024-01-02T12:00:00Z"),
        described(source.url("f"), b"f v1", change="created", datetime="2024-01-02T13:00:00Z"),
        Resource(uri=source.url("f"), change="deleted", datetime="2024-01-02T14:00:00Z"),
        source.resource("g", b"g v1", change="created", datetime="2024-01-03T00:00:00Z"),
        Resource(uri=source.url("d"), change="deleted", datetime="2024-01-03T00:00:01Z"),
    ]
    source.capability_list(
        resourcelist=source.url("resourcelist.xml"),
        changelist=change_list(source, "changelist.xml", changes, since=AT),
    )

    report = run_harvest(
        make_config(source, destination),
        Mode.INCREMENTAL,
        range_from=utc("2024-01-02T00:00:00Z"),
        range_until=utc("2024-01-03T00:00:00Z"),
    )

    assert (report.downloaded, report.deleted, report.skipped, report.failed) == (3, 1, 1, 0)
    assert copy_of(source, destination, "a").read_bytes() == b"a v3"
    assert not copy_of(source, destination, "b").exists()
    assert copy_of(source, destination, "c").read_bytes() == b"c v1"  # deleted before the range
    assert copy_of(source, destination, "d").read_bytes() == b"d v1"  # deleted after the range
    assert copy_of(source, destination, "e").read_bytes() == b"e v1"
    assert not copy_of(source, destination, "f").exists()  # created, then deleted
    assert copy_of(source, destination, "g").read_bytes() == b"g v1"  # at the inclusive end
    assert source.requested("f") == []


def test_incremental_defaults_to_the_last_sync_point(source: Source, destination: Path) -> None:
    baseline(source, destination, {"a": b"a v1"})
    source.put("a", b"a v2")
    changes = [
        described(source.url("a"), b"a v2", change="updated", datetime="2024-01-01T00:00:00Z")
    ]
    source.capability_list(
        resourcelist=source.url("resourcelist.xml"),
        changelist=change_list(source, "changelist.xml", changes, since=AT),
    )

    report = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)

    assert (report.range_from, report.range_until) == (utc(AT), NOW)
    assert report.downloaded == 1
    assert copy_of(source, destination, "a").read_bytes() == b"a v2"
    # The sync point moves to the newest change applied, in the source's clock.
    assert load_state(destination, source.url("capabilitylist.xml")).synced_until == utc(AT)


def test_incremental_from_change_list_index_reads_only_intersecting_parts(
    source: Source, destination: Path
) -> None:
    baseline(source, destination, {"a": b"a v1", "b": b"b v1"})
    source.put("a", b"a v3")
    (source.root / "b").unlink()
    parts = [
        (
            "cl1.xml",
            "2024-01-01T00:00:00Z",
            "2024-01-02T00:00:00Z",
            [
                source.resource("x", b"x v1", change="created", datetime="2024-01-01T12:00:00Z"),
            ],
        ),
        (
            "cl2.xml",
            "2024-01-02T00:00:00Z",
            "2024-01-03T00:00:00Z",
            [
                described(
                    source.url("a"), b"a v2", change="updated", datetime="2024-01-02T12:00:00Z"
                ),
            ],
        ),
        (
            "cl3.xml",
            "2024-01-03T00:00:00Z",
            None,
            [
                described(
                    source.url("a"), b"a v3", change="updated", datetime="2024-01-03T05:00:00Z"
                ),
                Resource(uri=source.url("b"), change="deleted", datetime="2024-01-03T06:00:00Z"),
            ],
        ),
    ]
    index = ListBase(capability_name="changelist")
    index.sitemapindex = True
    index.md_from = AT
    index.up = source.url("capabilitylist.xml")
    for name, since, until, changes in parts:
        change_list(source, name, changes, since=since, until=until)
        index.add(Resource(uri=source.url(name), md_from=since, md_until=until))
    source.capability_list(
        resourcelist=source.url("resourcelist.xml"),
        changelist=source.publish("changelist.xml", index.as_xml()),
    )

    report = run_harvest(
        make_config(source, destination),
        Mode.INCREMENTAL,
        range_from=utc("2024-01-02T06:00:00Z"),
        range_until=NOW,
    )

    assert source.requested("cl1.xml") == []
    assert (report.downloaded, report.deleted, report.failed) == (1, 1, 0)
    assert copy_of(source, destination, "a").read_bytes() == b"a v3"
    assert not copy_of(source, destination, "b").exists()
    assert not copy_of(source, destination, "x").exists()


def change_package(
    source: Source,
    name: str,
    since: str,
    until: str | None,
    changes: list[tuple[Resource, bytes]],
    broken: bytes | None = None,
) -> Resource:
    """Serve a Change Dump package of `changes` (each with its member's bytes), or the
    `broken` bytes in its place, and describe it as its dump lists it."""
    manifest = ChangeDumpManifest()
    manifest.md_from = since
    if until:
        manifest.md_until = until
    manifest.add([resource for resource, _ in changes])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("manifest.xml", manifest.as_xml())
        for resource, content in changes:
            if resource.path:
                archive.writestr(resource.path.lstrip("/"), content)
    package = broken or buffer.getvalue()
    source.put(name, package)
    return described(
        source.url(name), package, mime_type="application/zip", md_from=since, md_until=until
    )


def dumped_change(
    source: Source, path: str, content: bytes, kind: str, when: str, member: str
) -> tuple[Resource, bytes]:
    return described(source.url(path), content, change=kind, datetime=when, path=member), content


def change_dump(source: Source, packages: list[Resource]) -> str:
    dump = ChangeDump()
    dump.md_from = AT
    dump.up = source.url("capabilitylist.xml")
    dump.add(packages)
    return source.publish("changedump.xml", dump.as_xml())


def test_incremental_prefers_the_change_dump(source: Source, destination: Path) -> None:
    baseline(source, destination, {"a": b"a v1", "b": b"b v1"})
    package = partial(change_package, source)
    change = partial(dumped_change, source)

    packages = [
        package(
            "cd1.zip",
            "2024-01-01T00:00:00Z",
            "2024-01-02T00:00:00Z",
            [
                change("x", b"x v1", "created", "2024-01-01T12:00:00Z", "/changes/x"),
            ],
        ),
        package(
            "cd2.zip",
            "2024-01-02T00:00:00Z",
            "2024-01-03T00:00:00Z",
            [
                change("a", b"a v2", "updated", "2024-01-02T12:00:00Z", "/changes/a-v2"),
                change("e", b"e v1", "created", "2024-01-02T13:00:00Z", "/changes/e"),
            ],
        ),
        package(
            "cd3.zip",
            "2024-01-03T00:00:00Z",
            None,
            [
                change("a", b"a v3", "updated", "2024-01-03T05:00:00Z", "/changes/a-v3"),
                (
                    Resource(
                        uri=source.url("b"), change="deleted", datetime="2024-01-03T06:00:00Z"
                    ),
                    b"",
                ),
            ],
        ),
    ]
    source.capability_list(
        resourcelist=source.url("resourcelist.xml"),
        changelist=change_list(source, "changelist.xml", [], since=AT),
        changedump=change_dump(source, packages),
    )

    report = run_harvest(
        make_config(source, destination),
        Mode.INCREMENTAL,
        range_from=utc("2024-01-02T06:00:00Z"),
        range_until=NOW,
    )

    assert source.requested("cd1.zip") == []
    assert source.requested("changelist.xml") == []
    assert (report.downloaded, report.deleted, report.failed) == (2, 1, 0)
    assert copy_of(source, destination, "a").read_bytes() == b"a v3"
    assert copy_of(source, destination, "e").read_bytes() == b"e v1"
    assert not copy_of(source, destination, "b").exists()
    assert not copy_of(source, destination, "x").exists()


# --- Audit ----------------------------------------------------------------------


def test_audit_reports_no_difference_after_sync_and_differences_after_changes(
    source: Source, destination: Path
) -> None:
    baseline(source, destination, {"a": b"a v1", "b": b"b v1", "c": b"c v1"})
    config = make_config(source, destination)

    clean = run_harvest(config, Mode.AUDIT)

    assert clean.audit is not None and clean.audit.in_sync and clean.audit.same == 3
    resource_list(
        source,
        [
            source.resource("a", b"a v2"),
            source.resource("c", b"c v1"),
            source.resource("d", b"d v1"),
        ],
    )

    changed = run_harvest(config, Mode.AUDIT)

    assert changed.audit is not None and not changed.ok
    assert [d.uri for d in changed.audit.changed] == [source.url("a")]
    assert changed.audit.missing == [source.url("d")]
    assert changed.audit.extra == [f"127.0.0.1_{source.port}/b"]
    assert changed.audit.same == 1


# --- Safety ---------------------------------------------------------------------


def test_a_deletion_on_a_host_it_may_not_fetch_from_deletes_nothing(
    source: Source, destination: Path
) -> None:
    """A hostile Change List names another host's copy (or any file whose first folder looks
    like a host name) as deleted: the harvest may only delete what it may fetch."""
    baseline(source, destination, {"a": b"a v1"})
    elsewhere = destination / "other.example" / "x"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(b"not this source's")
    changes = [
        Resource(uri="http://other.example/x", change="deleted", datetime="2024-01-02T00:00:00Z"),
        Resource(uri=source.url("a"), change="deleted", datetime="2024-01-02T00:00:01Z"),
    ]
    source.capability_list(
        resourcelist=source.url("resourcelist.xml"),
        changelist=change_list(source, "changelist.xml", changes, since=AT),
    )

    report = run_harvest(
        make_config(source, destination), Mode.INCREMENTAL, range_from=utc(AT), now=NOW
    )

    assert elsewhere.read_bytes() == b"not this source's"
    assert not copy_of(source, destination, "a").exists()
    assert (report.deleted, report.failed) == (1, 0)


def test_traversal_in_uri_is_refused(source: Source, destination: Path, tmp_path: Path) -> None:
    hostile = [
        f"http://127.0.0.1:{source.port}/res/../../../escaped",
        f"http://127.0.0.1:{source.port}/res/%2e%2e/%2e%2e/%2e%2e/escaped",
        f"http://127.0.0.1:{source.port}/res/..%2F..%2F..%2Fescaped",
    ]
    source.put("escaped", b"pwned")
    resources = [source.resource("res/ok", b"fine")] + [described(uri, b"pwned") for uri in hostile]
    source.capability_list(resourcelist=resource_list(source, resources))

    report = run_harvest(make_config(source, destination), Mode.BASELINE)

    assert report.downloaded == 1
    assert sorted(f.uri for f in report.failures) == sorted(hostile)
    assert source.requested("escaped") == []
    written = [p for p in tmp_path.rglob("escaped") if source.root not in p.parents]
    assert written == []


def zip_of(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def package_of(manifest: ResourceDumpManifest, members: dict[str, bytes]) -> bytes:
    return zip_of({"manifest.xml": manifest.as_xml().encode(), **members})


def manifest_of(source: Source, members: dict[str, bytes]) -> ResourceDumpManifest:
    """A manifest giving each member as the resource of the same name."""
    manifest = ResourceDumpManifest()
    manifest.md_at = AT
    for name, data in members.items():
        manifest.add(described(source.url(name), data, path=f"/{name}"))
    return manifest


def serve_packages(
    source: Source, packages: dict[str, bytes], listed: list[Resource] | None
) -> None:
    """A Resource Dump of `packages` (by name), and a Resource List of `listed` unless
    None, in the Capability List."""
    dump = ResourceDump()
    dump.md_at = AT
    for name, package in packages.items():
        source.put(name, package)
        dump.add(described(source.url(name), package))
    documents = {"resourcedump": source.publish("resourcedump.xml", dump.as_xml())}
    if listed is not None:
        documents["resourcelist"] = resource_list(source, listed)
    source.capability_list(**documents)


def serve_one_package(
    source: Source,
    manifest: ResourceDumpManifest,
    members: dict[str, bytes],
    listed: list[Resource] | None = None,
) -> None:
    """A Resource Dump of one package (`manifest` and `members`), and a Resource List of
    `listed`, in the Capability List."""
    serve_packages(source, {"dump.zip": package_of(manifest, members)}, listed or [])


def test_traversal_in_zip_member_path_is_refused(
    source: Source, destination: Path, tmp_path: Path
) -> None:
    manifest = ResourceDumpManifest()
    manifest.md_at = AT
    manifest.add(described(source.url("ok"), b"fine", path="/ok"))
    manifest.add(described(source.url("evil"), b"pwned", path="/../../escaped"))
    serve_one_package(source, manifest, {"ok": b"fine", "../../escaped": b"pwned"})

    report = run_harvest(make_config(source, destination), Mode.BASELINE)

    assert report.downloaded == 1
    assert [f.uri for f in report.failures] == [source.url("evil")]
    assert "member path" in report.failures[0].reason
    assert list(tmp_path.rglob("escaped")) == []


def test_a_member_named_by_several_entries_is_written_for_none(
    source: Source, destination: Path
) -> None:
    """A small package could otherwise fill the disk: one large member, named by thousands
    of manifest entries without lengths, each written out in full."""
    manifest = ResourceDumpManifest()
    manifest.md_at = AT
    manifest.add(described(source.url("ok"), b"fine", path="/ok"))
    for n in range(3):
        manifest.add(Resource(uri=source.url(f"copy{n}"), path="/big"))
    serve_one_package(source, manifest, {"ok": b"fine", "big": b"\0" * 1_000_000})

    report = run_harvest(make_config(source, destination), Mode.BASELINE)

    assert report.downloaded == 1
    assert sorted(f.uri for f in report.failures) == [source.url(f"copy{n}") for n in range(3)]
    assert all("several entries" in f.reason for f in report.failures)
    assert not any(copy_of(source, destination, f"copy{n}").exists() for n in range(3))


def test_a_member_that_fails_its_manifest_is_fetched_from_the_list(
    source: Source, destination: Path
) -> None:
    """A member whose bytes differ from its manifest entry was failed and never fetched
    from the Resource List, as a resource the dump left out is: the baseline ended
    without it, and with its sync point unmoved."""
    listed = [source.resource("a", b"alpha"), source.resource("b", b"bravo")]
    manifest = ResourceDumpManifest()
    manifest.md_at = AT
    manifest.add(described(source.url("a"), b"alpha", path="/a"))
    manifest.add(described(source.url("b"), b"bravo", path="/b"))
    serve_one_package(source, manifest, {"a": b"alpha", "b": b"BRAVO"}, listed=listed)

    report = run_harvest(make_config(source, destination), Mode.BASELINE, now=NOW)

    assert (report.downloaded, report.failed, report.deferred) == (2, 0, [])
    assert (source.requested("a"), source.requested("b")) == ([], ["/b"])
    assert copy_of(source, destination, "a").read_bytes() == b"alpha"
    assert copy_of(source, destination, "b").read_bytes() == b"bravo"
    [warning] = report.warnings
    assert warning.startswith(f"{source.url('b')}: not taken from the Resource Dump (md5 is ")
    assert warning.endswith("fetched from its URI")
    state = load_state(destination, source.url("capabilitylist.xml"))
    assert (set(state.resources), state.synced_until) == (
        {source.url("a"), source.url("b")},
        utc(AT),
    )


def test_a_member_that_fails_and_is_not_listed_stays_a_failure(
    source: Source, destination: Path
) -> None:
    manifest = ResourceDumpManifest()
    manifest.md_at = AT
    manifest.add(described(source.url("a"), b"alpha", path="/a"))
    manifest.add(described(source.url("b"), b"bravo", path="/b"))
    serve_one_package(
        source, manifest, {"a": b"alpha", "b": b"BRAVO"}, listed=[source.resource("a", b"alpha")]
    )

    report = run_harvest(make_config(source, destination), Mode.BASELINE, now=NOW)

    assert (report.downloaded, report.warnings) == (1, [])
    assert [(f.uri, f.reason.split(" is ")[0]) for f in report.failures] == [
        (source.url("b"), "md5")
    ]
    assert not copy_of(source, destination, "b").exists()
    assert load_state(destination, source.url("capabilitylist.xml")).synced_until is None


#: A package each way it can fail whole, and the start of the reason the harvester gives.
BROKEN_PACKAGES = {
    "download": (None, "GET "),
    "not a ZIP": (b"not a ZIP at all", "unusable package: File is not a zip file"),
    "no manifest": (zip_of({"b": b"bravo"}), "the package has no manifest.xml"),
    "bad manifest": (
        zip_of({"manifest.xml": b"<urlset", "b": b"bravo"}),
        "unusable package: ",
    ),
}


def serve_a_broken_package(source: Source, how: str, listed: list[Resource] | None) -> None:
    """dump0.zip gives `a`; dump1.zip, which would give `b`, fails as `how` says."""
    broken, _ = BROKEN_PACKAGES[how]
    packages = {
        "dump0.zip": package_of(manifest_of(source, {"a": b"alpha"}), {"a": b"alpha"}),
        "dump1.zip": broken or package_of(manifest_of(source, {"b": b"bravo"}), {"b": b"bravo"}),
    }
    serve_packages(source, packages, listed)
    if broken is None:
        (source.root / "dump1.zip").unlink()  # listed by the dump, not served: a 404


@pytest.mark.parametrize("how", BROKEN_PACKAGES)
def test_a_failed_package_the_list_makes_up_for_is_a_warning(
    source: Source, destination: Path, how: str
) -> None:
    """The Resource List fetched all a failed package held, yet the package stayed a
    failure: the run was not ok and its sync point never moved, so every later run
    failed on a complete destination."""
    listed = [source.resource("a", b"alpha"), source.resource("b", b"bravo")]
    serve_a_broken_package(source, how, listed)

    report = run_harvest(make_config(source, destination), Mode.BASELINE, now=NOW)

    assert (report.downloaded, report.failures, report.deferred) == (2, [], [])
    assert (source.requested("a"), source.requested("b")) == ([], ["/b"])
    assert copy_of(source, destination, "b").read_bytes() == b"bravo"
    [warning] = report.warnings
    package = source.url("dump1.zip")
    assert warning.startswith(f"{package}: not taken from the Resource Dump (")
    assert BROKEN_PACKAGES[how][1] in warning
    assert warning.endswith("the Resource List stood in for it (read whole, no fetch failed)")
    state = load_state(destination, source.url("capabilitylist.xml"))
    assert (report.ok, state.synced_until) == (True, utc(AT))


def serve_a_dump_with_a_broken_document(source: Source, broken: str) -> None:
    """A Resource Dump index of two parts, giving `a` and `b`; `broken` (the top document
    or the second part) answers 404. A Resource List lists both."""
    packages = {
        "dump0.zip": package_of(manifest_of(source, {"a": b"alpha"}), {"a": b"alpha"}),
        "dump1.zip": package_of(manifest_of(source, {"b": b"bravo"}), {"b": b"bravo"}),
    }
    index = ListBase(capability_name="resourcedump")
    index.sitemapindex = True
    index.md_at = AT
    for number, (name, package) in enumerate(packages.items()):
        source.put(name, package)
        part = source.publish(f"resourcedump{number}.xml", dump_document(source, [name]))
        index.add(Resource(uri=part, md_at=AT))
    dump_url = source.publish("resourcedump.xml", index.as_xml())
    listed = resource_list(source, [source.resource("a", b"alpha"), source.resource("b", b"bravo")])
    source.capability_list(resourcelist=listed, resourcedump=dump_url)
    (source.root / ("resourcedump.xml" if broken == "top" else "resourcedump1.xml")).unlink()


@pytest.mark.parametrize("broken", ["top", "part"])
def test_an_unreadable_dump_document_the_list_makes_up_for_is_a_warning(
    source: Source, destination: Path, broken: str
) -> None:
    """A Resource Dump (or a part of its index) that could not be read failed the run
    (the top: stopped it) though the Resource List brought every resource: the sync point
    never moved, and every later run failed on a complete destination."""
    serve_a_dump_with_a_broken_document(source, broken)

    report = run_harvest(make_config(source, destination), Mode.BASELINE, now=NOW)

    assert (report.downloaded, report.failures, report.deferred) == (2, [], [])
    assert copy_of(source, destination, "b").read_bytes() == b"bravo"
    assert source.requested("a") == ([] if broken == "part" else ["/a"])
    [warning] = report.warnings
    unread = source.url("resourcedump.xml" if broken == "top" else "resourcedump1.xml")
    assert warning.startswith(f"{unread}: not taken from the Resource Dump (")
    assert warning.endswith("the Resource List stood in for it (read whole, no fetch failed)")
    state = load_state(destination, source.url("capabilitylist.xml"))
    assert (report.ok, state.synced_until) == (True, utc(AT))


def test_an_unreadable_dump_part_nothing_makes_up_for_stays_a_failure(
    source: Source, destination: Path
) -> None:
    serve_a_dump_with_a_broken_document(source, "part")
    source.planned_errors["b"] = [403]

    report = run_harvest(make_config(source, destination), Mode.BASELINE, now=NOW)

    failed = [source.url("resourcedump1.xml"), source.url("b")]
    assert sorted(f.uri for f in report.failures) == sorted(failed)
    assert not report.ok


@pytest.mark.parametrize("how", BROKEN_PACKAGES)
@pytest.mark.parametrize("listing", ["no list", "a listed resource fails"])
def test_a_failed_package_nothing_makes_up_for_stays_a_failure(
    source: Source, destination: Path, how: str, listing: str
) -> None:
    listed = [source.resource("a", b"alpha"), source.resource("b", b"bravo")]
    source.planned_errors["b"] = [403]
    serve_a_broken_package(source, how, listed if listing != "no list" else None)

    report = run_harvest(make_config(source, destination), Mode.BASELINE, now=NOW)

    failed = [source.url("dump1.zip")] + ([source.url("b")] if listing != "no list" else [])
    assert sorted(f.uri for f in report.failures) == sorted(failed)
    package_failure = next(f for f in report.failures if f.uri == source.url("dump1.zip"))
    assert package_failure.reason.startswith(BROKEN_PACKAGES[how][1])
    assert report.warnings == []
    assert load_state(destination, source.url("capabilitylist.xml")).synced_until is None


@pytest.mark.parametrize("listed", [True, False], ids=["listed", "no list"])
def test_a_member_that_fails_in_one_package_and_is_given_by_another(
    source: Source, destination: Path, listed: bool
) -> None:
    """`b` in two packages, its bytes wrong in the first: the dump gives it, nothing is
    fetched, yet the warning said "fetched from its URI" (without a list, `b` failed)."""
    resources = [source.resource("a", b"alpha"), source.resource("b", b"bravo")]
    manifest = manifest_of(source, {"a": b"alpha", "b": b"bravo"})
    bad = package_of(manifest, {"a": b"alpha", "b": b"BRAVO"})
    good = package_of(manifest_of(source, {"b": b"bravo"}), {"b": b"bravo"})
    serve_packages(source, {"dump0.zip": bad, "dump1.zip": good}, resources if listed else None)

    report = run_harvest(make_config(source, destination), Mode.BASELINE, now=NOW)

    assert (report.downloaded, report.skipped, report.failures) == (2, 0, [])
    assert (source.requested("a"), source.requested("b")) == ([], [])
    assert copy_of(source, destination, "b").read_bytes() == b"bravo"
    [warning] = report.warnings
    assert warning.startswith(
        f"{source.url('b')}: a member of one Resource Dump package failed (md5 is "
    )
    assert warning.endswith("; taken from another package that holds it")
    assert load_state(destination, source.url("capabilitylist.xml")).synced_until == utc(AT)


#: Ways a Change Dump package fails: each whole-package way, and one member's bytes wrong.
BROKEN_CHANGE_PACKAGES = [*BROKEN_PACKAGES, "a member"]


def serve_a_change_dump_with_a_broken_package(
    source: Source, destination: Path, how: str | None, listed: bool, index: str | None = None
) -> None:
    """Baseline a, b, c, d; then cd1 gives c v2, cd2 (which fails as `how` says) a v2,
    b deleted and d v2, cd3 d v3; the Change List (if `listed`) holds the same changes.
    With `index`, the Change Dump is an index of a part a package, `index` (the top
    document or the second part) answering 404."""
    baseline(source, destination, {"a": b"a v1", "b": b"b v1", "c": b"c v1", "d": b"d v1"})
    source.requests.clear()
    change = partial(dumped_change, source)
    good = change("a", b"a v2", "updated", "2024-01-02T12:00:00Z", "/changes/a")
    wrong = (good[0], b"A V2") if how == "a member" else good
    cd2 = [
        wrong,
        (Resource(uri=source.url("b"), change="deleted", datetime="2024-01-02T13:00:00Z"), b""),
        change("d", b"d v2", "updated", "2024-01-02T14:00:00Z", "/changes/d-v2"),
    ]
    cd1 = [change("c", b"c v2", "updated", "2024-01-01T12:00:00Z", "/changes/c")]
    cd3 = [change("d", b"d v3", "updated", "2024-01-03T05:00:00Z", "/changes/d-v3")]
    broken = BROKEN_PACKAGES[how][0] if how in BROKEN_PACKAGES else None
    packages = [
        change_package(source, "cd1.zip", AT, "2024-01-02T00:00:00Z", cd1),
        change_package(
            source, "cd2.zip", "2024-01-02T00:00:00Z", "2024-01-03T00:00:00Z", cd2, broken
        ),
        change_package(source, "cd3.zip", "2024-01-03T00:00:00Z", None, cd3),
    ]
    if how == "download":
        (source.root / "cd2.zip").unlink()  # listed by the dump, not served: a 404
    source.put("a", b"a v2")
    source.put("c", b"c v2")
    source.put("d", b"d v3")  # so fetching d v2 from its URI would fail
    (source.root / "b").unlink()
    dump = (
        change_dump(source, packages)
        if index is None
        else change_dump_index(source, packages, index)
    )
    documents = {"changedump": dump}
    if listed:
        changes = [resource for resource, _ in cd1 + cd2 + cd3]
        documents["changelist"] = change_list(source, "changelist.xml", changes, since=AT)
    source.capability_list(resourcelist=source.url("resourcelist.xml"), **documents)


@pytest.mark.parametrize("how", BROKEN_CHANGE_PACKAGES)
def test_a_failed_change_dump_package_is_made_up_for_by_the_change_list(
    source: Source, destination: Path, how: str
) -> None:
    """A Change Dump package that could not be used failed the incremental run and kept
    its sync point, so with a package broken for good every later run failed alike,
    though the Change List held the same changes."""
    serve_a_change_dump_with_a_broken_package(source, destination, how, listed=True)

    report = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)

    assert (report.downloaded, report.deleted, report.failures) == (3, 1, [])
    # a from its URI; c from cd1 and d from cd3, the latest change of each, not fetched
    assert [path for path in source.requests if path in ("/a", "/c", "/d")] == ["/a"]
    assert len(source.requested("changelist.xml")) == 1
    for path, content in {"a": b"a v2", "c": b"c v2", "d": b"d v3"}.items():
        assert copy_of(source, destination, path).read_bytes() == content
    assert not copy_of(source, destination, "b").exists()
    [warning] = report.warnings
    if how == "a member":
        assert warning.startswith(
            f"{source.url('a')}: not taken from the Change Dump package {source.url('cd2.zip')}"
            " (md5 is "
        )
        assert warning.endswith("; taken from the Change List")
    else:
        assert warning.startswith(
            f"{source.url('cd2.zip')}: not taken from the Change Dump ({BROKEN_PACKAGES[how][1]}"
        )
        assert warning.endswith("; its changes were taken from the Change List")
    state = load_state(destination, source.url("capabilitylist.xml"))
    assert (report.ok, state.synced_until) == (True, utc("2024-01-03T05:00:00Z"))


#: Which document of a Change Dump index answers 404, by what `change_dump_index` breaks.
UNREADABLE_CHANGE_DUMP = {
    "top": "changedump.xml",
    "part": "changedump1.xml",
    "first part": "changedump0.xml",
}


def change_dump_index(source: Source, packages: list[Resource], broken: str) -> str:
    """A Change Dump index of a part a package, each part's interval its package's;
    `broken` (the top document, the second part or the first) answers 404."""
    index = ListBase(capability_name="changedump")
    index.sitemapindex = True
    index.md_from = AT
    for number, package in enumerate(packages):
        dump = ChangeDump()
        dump.md_from, dump.md_until = package.md_from, package.md_until
        dump.up = source.url("capabilitylist.xml")
        dump.add(package)
        part = source.publish(f"changedump{number}.xml", dump.as_xml())
        index.add(Resource(uri=part, md_from=package.md_from, md_until=package.md_until))
    url = source.publish("changedump.xml", index.as_xml())
    (source.root / UNREADABLE_CHANGE_DUMP[broken]).unlink()
    return url


@pytest.mark.parametrize("broken", UNREADABLE_CHANGE_DUMP)
def test_an_unreadable_change_dump_document_is_made_up_for_by_the_change_list(
    source: Source, destination: Path, broken: str
) -> None:
    """A Change Dump, or the part of its index holding a package, that could not be read
    failed the run (the top: stopped it) though the Change List held the same changes:
    the sync point never moved, and every later run failed alike. (The first part: the
    run also said changes before the second may be missed, and to run a baseline.)"""
    serve_a_change_dump_with_a_broken_package(source, destination, None, True, index=broken)

    report = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)

    assert (report.downloaded, report.deleted, report.failures) == (3, 1, [])
    # What the list stood in for: a in cd2 (part 1), c in cd1 (part 0), all for the top.
    fetched = {"top": ["/a", "/c", "/d"], "part": ["/a"], "first part": ["/c"]}[broken]
    assert sorted(p for p in source.requests if p in ("/a", "/c", "/d")) == fetched
    for path, content in {"a": b"a v2", "c": b"c v2", "d": b"d v3"}.items():
        assert copy_of(source, destination, path).read_bytes() == content
    assert not copy_of(source, destination, "b").exists()
    [warning] = report.warnings
    unread = source.url(UNREADABLE_CHANGE_DUMP[broken])
    assert warning.startswith(f"{unread}: not taken from the Change Dump (")
    assert warning.endswith("; its changes were taken from the Change List")
    state = load_state(destination, source.url("capabilitylist.xml"))
    assert (report.ok, state.synced_until) == (True, utc("2024-01-03T05:00:00Z"))


def test_an_unreadable_change_dump_part_is_asked_for_once_and_its_fault_named(
    source: Source, destination: Path
) -> None:
    """A Change Dump part set aside was downloaded again as a package: the source was asked
    twice for a document it could not serve, and the warning blamed a ZIP for bad XML."""
    serve_a_change_dump_with_a_broken_package(source, destination, None, True, index="part")
    source.put("changedump1.xml", b"<not xml")

    report = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)

    assert source.requested("changedump1.xml") == ["/changedump1.xml"]
    [warning] = report.warnings
    assert warning.startswith(
        f"{source.url('changedump1.xml')}: not taken from the Change Dump (not well-formed XML"
    )
    assert report.ok


def test_an_unreadable_change_dump_part_nothing_makes_up_for_stays_a_failure(
    source: Source, destination: Path
) -> None:
    serve_a_change_dump_with_a_broken_package(source, destination, None, False, index="part")

    report = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)

    assert [f.uri for f in report.failures] == [source.url("changedump1.xml")]
    assert load_state(destination, source.url("capabilitylist.xml")).synced_until == utc(AT)


@pytest.mark.parametrize("how", BROKEN_CHANGE_PACKAGES)
@pytest.mark.parametrize("listing", ["no list", "list unreadable"])
def test_a_failed_change_dump_package_nothing_makes_up_for_stays_a_failure(
    source: Source, destination: Path, how: str, listing: str
) -> None:
    serve_a_change_dump_with_a_broken_package(source, destination, how, listed=listing != "no list")
    if listing == "list unreadable":
        source.planned_errors["changelist.xml"] = [403] * 3

    report = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)

    failed = source.url("a") if how == "a member" else source.url("cd2.zip")
    expected = [failed] + ([source.url("changelist.xml")] if listing != "no list" else [])
    assert sorted(f.uri for f in report.failures) == sorted(expected)
    assert report.warnings == []
    assert "/a" not in source.requests
    state = load_state(destination, source.url("capabilitylist.xml"))
    assert state.synced_until == utc(AT)


def incremental_beside(source: Source, destination: Path, listing: str) -> SyncReport:
    """An incremental run of the Change Dump served, with `listing` advertised beside it."""
    source.capability_list(
        resourcelist=source.url("resourcelist.xml"),
        changelist=listing,
        changedump=source.url("changedump.xml"),
    )
    return run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)


@pytest.mark.parametrize("how", ["not a ZIP", "download"])
@pytest.mark.parametrize(
    ("since", "until"),
    [("2024-01-03T00:00:00Z", None), (AT, "2024-01-02T18:00:00Z")],
    ids=["list starts after the package", "list ends inside the package"],
)
def test_a_change_list_that_does_not_span_a_failed_package_does_not_stand_in(
    source: Source, destination: Path, how: str, since: str, until: str | None
) -> None:
    """A list that starts later (retention) or ends early cannot vouch for what the failed
    package held: its changes would be lost, and the sync point moved past them."""
    serve_a_change_dump_with_a_broken_package(source, destination, how, listed=False)
    d3 = described(source.url("d"), b"d v3", change="updated", datetime="2024-01-03T05:00:00Z")
    listing = change_list(source, "changelist.xml", [d3], since=since, until=until)

    report = incremental_beside(source, destination, listing)

    [failure] = report.failures
    assert failure.uri == source.url("cd2.zip")
    assert "; the Change List does not span 2024-01-02T00:00:00+00:00.." in failure.reason
    assert report.warnings == []
    assert load_state(destination, source.url("capabilitylist.xml")).synced_until == utc(AT)
    assert copy_of(source, destination, "b").exists()  # its deletion was in cd2 only


def test_an_undated_list_entry_in_a_failed_package_interval_keeps_the_failure(
    source: Source, destination: Path
) -> None:
    """An undated change cannot be placed in the package's interval: what it stands for is
    unknown, so the list does not stand in."""
    serve_a_change_dump_with_a_broken_package(source, destination, "not a ZIP", listed=False)
    a2 = described(source.url("a"), b"a v2", change="updated", datetime="2024-01-02T12:00:00Z")
    undated = Resource(uri=source.url("b"), change="deleted")
    listing = change_list(source, "changelist.xml", [a2, undated], since=AT)

    report = incremental_beside(source, destination, listing)

    [failure] = report.failures
    assert failure.uri == source.url("cd2.zip")
    assert failure.reason.endswith(
        "; the Change List has changes without a datetime that may lie in it"
    )
    assert load_state(destination, source.url("capabilitylist.xml")).synced_until == utc(AT)


def serve_a_failed_package_and_a_failed_member(
    source: Source,
    destination: Path,
    e_at: str = "2024-01-03T12:00:00Z",
    e_bytes: bytes | None = b"E V2",
) -> str:
    """Baseline a, e; cd2 ([AT, 01-03]) is not a ZIP and held a v2; cd3 (from 01-03) holds
    e v2 at `e_at` with `e_bytes` (wrong ones; None: right); the Change List holds both
    changes. Its URL."""
    baseline(source, destination, {"a": b"a v1", "e": b"e v1"})
    source.requests.clear()
    change = partial(dumped_change, source)
    a2 = change("a", b"a v2", "updated", "2024-01-02T12:00:00Z", "/changes/a")
    e2 = change("e", b"e v2", "updated", e_at, "/changes/e")
    packages = [
        change_package(source, "cd2.zip", AT, "2024-01-03T00:00:00Z", [a2], b"not a ZIP"),
        change_package(
            source,
            "cd3.zip",
            "2024-01-03T00:00:00Z",
            None,
            [e2 if e_bytes is None else (e2[0], e_bytes)],
        ),
    ]
    source.put("a", b"a v2")
    source.put("e", b"e v2")
    listing = change_list(source, "changelist.xml", [a2[0], e2[0]], since=AT)
    source.capability_list(
        resourcelist=source.url("resourcelist.xml"),
        changelist=listing,
        changedump=change_dump(source, packages),
    )
    return listing


def test_a_failed_package_and_a_failed_member_read_the_change_list_once(
    source: Source, destination: Path
) -> None:
    serve_a_failed_package_and_a_failed_member(source, destination)

    report = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)

    assert len(source.requested("changelist.xml")) == 1
    assert (report.ok, len(report.warnings)) == (True, 2)
    for path in ("a", "e"):
        assert copy_of(source, destination, path).read_bytes() == path.encode() + b" v2"


def test_an_unreadable_change_list_is_one_failure_for_a_package_and_a_member(
    source: Source, destination: Path
) -> None:
    listing = serve_a_failed_package_and_a_failed_member(source, destination)
    source.planned_errors["changelist.xml"] = [403] * 6

    report = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)

    assert sorted(f.uri for f in report.failures) == sorted(
        [source.url("cd2.zip"), source.url("e"), listing]
    )
    assert len(source.requested("changelist.xml")) == 1


def test_a_change_a_package_gives_wins_over_the_lists_copy_at_a_shared_boundary(
    source: Source, destination: Path
) -> None:
    """e changed at the instant cd2 (failed) ends and cd3 (read fine) starts: cd3 gives it."""
    serve_a_failed_package_and_a_failed_member(
        source, destination, e_at="2024-01-03T00:00:00Z", e_bytes=None
    )

    report = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)

    assert report.ok
    assert [path for path in source.requests if path in ("/a", "/e")] == ["/a"]
    assert copy_of(source, destination, "e").read_bytes() == b"e v2"


def test_a_failed_members_stand_in_is_no_older_than_its_change(
    source: Source, destination: Path
) -> None:
    """The list's change to e in cd3's interval predates the member's: it is not the change
    the member held, so the member stays a failure."""
    serve_a_failed_package_and_a_failed_member(source, destination)
    a2 = described(source.url("a"), b"a v2", change="updated", datetime="2024-01-02T12:00:00Z")
    e1 = described(source.url("e"), b"e v2", change="updated", datetime="2024-01-03T06:00:00Z")
    change_list(source, "changelist.xml", [a2, e1], since=AT)

    report = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)

    assert [f.uri for f in report.failures] == [source.url("e")]
    assert "/e" not in source.requests
    assert copy_of(source, destination, "e").read_bytes() == b"e v1"


def test_a_failed_members_stand_in_is_from_its_own_packages_interval(
    source: Source, destination: Path
) -> None:
    """a's member in cd1 and e's in cd3 fail; the list's later change to a, in cd3's
    interval (which the dump does not hold), is not a's stand-in: its change in cd1's is."""
    baseline(source, destination, {"a": b"a v1", "e": b"e v1"})
    source.requests.clear()
    change = partial(dumped_change, source)
    a2 = change("a", b"a v2", "updated", "2024-01-01T12:00:00Z", "/changes/a")
    e2 = change("e", b"e v2", "updated", "2024-01-02T12:00:00Z", "/changes/e")
    packages = [
        change_package(source, "cd1.zip", AT, "2024-01-02T00:00:00Z", [(a2[0], b"A V2")]),
        change_package(source, "cd3.zip", "2024-01-02T00:00:00Z", None, [(e2[0], b"E V2")]),
    ]
    source.put("a", b"a v2")
    source.put("e", b"e v2")
    a3 = described(source.url("a"), b"a v3", change="updated", datetime="2024-01-02T06:00:00Z")
    listing = change_list(source, "changelist.xml", [a2[0], a3, e2[0]], since=AT)
    source.capability_list(
        resourcelist=source.url("resourcelist.xml"),
        changelist=listing,
        changedump=change_dump(source, packages),
    )

    report = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)

    assert (report.ok, report.failures) == (True, [])
    for path in ("a", "e"):
        assert copy_of(source, destination, path).read_bytes() == path.encode() + b" v2"


def test_hash_mismatch_keeps_the_previous_copy_and_fails(source: Source, destination: Path) -> None:
    baseline(source, destination, {"a": b"a v1"})
    source.put("a", b"a v9")  # what is served differs from what is listed, same length
    changes = [
        described(source.url("a"), b"a v2", change="updated", datetime="2024-01-02T00:00:00Z")
    ]
    source.capability_list(
        resourcelist=source.url("resourcelist.xml"),
        changelist=change_list(source, "changelist.xml", changes, since=AT),
    )

    report = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)

    assert [f.uri for f in report.failures] == [source.url("a")]
    assert "the source lists" in report.failures[0].reason
    assert copy_of(source, destination, "a").read_bytes() == b"a v1"
    assert [p.name for p in copy_of(source, destination, "").iterdir()] == ["a"]
    assert load_state(destination, source.url("capabilitylist.xml")).synced_until == utc(AT)


def test_length_mismatch_in_a_baseline_is_left_unsettled_without_writing(
    source: Source, destination: Path
) -> None:
    source.put("a", b"longer than listed")
    resources = [Resource(uri=source.url("a"), length=5, lastmod=AT)]
    source.capability_list(resourcelist=resource_list(source, resources))

    report = run_harvest(make_config(source, destination), Mode.BASELINE)

    assert (report.failed, report.changed) == (0, 1)
    assert "length" in report.deferred[0].reason
    assert not copy_of(source, destination, "a").exists()


# --- A source that changes while a baseline reads it --------------------------------


def test_resource_deleted_during_the_baseline_is_settled_by_the_incremental(
    source: Source, destination: Path, tmp_path: Path
) -> None:
    resources = [source.resource(name, f"{name} v1".encode()) for name in ("a", "b", "c")]
    source.capability_list(resourcelist=resource_list(source, resources))
    (source.root / "b").unlink()  # deleted after the Resource List was made
    config = write_config(tmp_path, source, destination)
    out = io.StringIO()

    call_command("harvest", str(config), "--baseline", stdout=out)

    summary = out.getvalue().splitlines()[-1]
    assert summary.startswith("baseline: downloaded 2, deleted 0, skipped 0, failed 0"), summary
    assert summary.endswith("; 1 gone and 0 changed while read, left to the next incremental run")
    state = load_state(destination, source.url("capabilitylist.xml"))
    assert state.synced_until == utc(AT)  # the Resource List's `at`
    assert list(state.unsettled) == [source.url("b")]
    assert "HTTP 404" in state.unsettled[source.url("b")]
    deletion = Resource(uri=source.url("b"), change="deleted", datetime="2024-01-01T00:00:05Z")
    source.capability_list(
        resourcelist=source.url("resourcelist.xml"),
        changelist=change_list(source, "changelist.xml", [deletion], since=AT),
    )

    report = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)

    assert (report.failed, report.deleted) == (0, 0)  # nothing to delete: never copied
    assert report.skipped == 1
    assert load_state(destination, source.url("capabilitylist.xml")).unsettled == {}


def test_resource_updated_during_the_baseline_is_settled_by_the_incremental(
    source: Source, destination: Path
) -> None:
    listed = [source.resource("a", b"a v1"), described(source.url("b"), b"b v1")]
    source.put("b", b"b version 2")  # updated after the Resource List was made
    source.capability_list(resourcelist=resource_list(source, listed))

    report = run_harvest(make_config(source, destination), Mode.BASELINE, now=NOW)

    assert (report.downloaded, report.failed, report.changed) == (1, 0, 1)
    assert not copy_of(source, destination, "b").exists()
    update = described(
        source.url("b"), b"b version 2", change="updated", datetime="2024-01-01T00:00:05Z"
    )
    source.capability_list(
        resourcelist=source.url("resourcelist.xml"),
        changelist=change_list(source, "changelist.xml", [update], since=AT),
    )

    report = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)

    assert (report.downloaded, report.failed) == (1, 0)
    assert copy_of(source, destination, "b").read_bytes() == b"b version 2"
    state = load_state(destination, source.url("capabilitylist.xml"))
    assert (state.unsettled, state.synced_until) == ({}, utc("2024-01-01T00:00:05Z"))


def test_a_difference_no_change_explains_fails_the_incremental(
    source: Source, destination: Path
) -> None:
    """A listing that was simply wrong is not hidden: the incremental fails it, and again."""
    source.put("a", b"served")
    source.capability_list(resourcelist=resource_list(source, [described(source.url("a"), b"x")]))
    run_harvest(make_config(source, destination), Mode.BASELINE, now=NOW)
    source.capability_list(
        resourcelist=source.url("resourcelist.xml"),
        changelist=change_list(source, "changelist.xml", [], since=AT),
    )

    first = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)
    second = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)

    for report in (first, second):
        assert [f.uri for f in report.failures] == [source.url("a")]
        assert "no change to it is listed since" in report.failures[0].reason
        assert (
            "more than the listed length of 1 bytes when the baseline" in report.failures[0].reason
        )
    assert load_state(destination, source.url("capabilitylist.xml")).synced_until == utc(AT)


def test_other_errors_still_fail_the_baseline(source: Source, destination: Path) -> None:
    source.planned_errors["b"] = [403]

    report = baseline(source, destination, {"a": b"a v1", "b": b"b v1"})

    assert [f.uri for f in report.failures] == [source.url("b")]
    assert report.deferred == []
    assert load_state(destination, source.url("capabilitylist.xml")).synced_until is None


def test_document_with_external_entity_is_refused(
    source: Source, destination: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    source.put(
        "resourcelist.xml",
        f"""<?xml version="1.0"?>
<!DOCTYPE urlset [<!ENTITY xxe SYSTEM "file://{secret}">]>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
        xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:md capability="resourcelist" at="{AT}"/>
  <url><loc>{source.url("a")}&xxe;</loc></url>
</urlset>""".encode(),
    )
    source.capability_list(resourcelist=source.url("resourcelist.xml"))

    with pytest.raises(HarvestError, match="DOCTYPE"):
        run_harvest(make_config(source, destination), Mode.BASELINE)

    assert not any("top secret" in p.read_text() for p in destination.rglob("*") if p.is_file())


def test_oversized_document_is_refused(source: Source, destination: Path) -> None:
    resources = [described(source.url(f"res/{n}"), b"x") for n in range(50)]
    source.capability_list(resourcelist=resource_list(source, resources))

    with pytest.raises(HarvestError, match="larger than the limit of 2048 bytes"):
        run_harvest(make_config(source, destination, max_document_bytes=2048), Mode.BASELINE)


def test_an_index_part_with_an_entry_larger_than_any_real_one_fails_alone(
    source: Source, destination: Path
) -> None:
    parts = []
    for part in ("a", "b"):
        listing = ResourceList()
        listing.md_at = AT
        listing.add([source.resource(f"{part}/{n}.txt", b"item") for n in range(2)])
        parts.append(source.publish(f"part-{part}.xml", listing.as_xml()))
    hostile = source.root / "part-b.xml"
    hostile.write_bytes(hostile.read_bytes().replace(b"<url>", b"<url>" + b"<x/>" * 1000, 1))
    index = "".join(f"<sitemap><loc>{part}</loc></sitemap>" for part in parts)
    source.publish(
        "resourcelist.xml",
        '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/">'
        f'<rs:md capability="resourcelist" at="{AT}"/>{index}</sitemapindex>',
    )
    source.capability_list(resourcelist=source.url("resourcelist.xml"))

    report = run_harvest(make_config(source, destination), Mode.BASELINE)

    assert (report.downloaded, report.failed) == (2, 1)
    assert [f.uri for f in report.failures] == [parts[1]]
    assert "more than 1000 elements" in report.failures[0].reason


def test_server_errors_are_retried(source: Source, destination: Path) -> None:
    source.planned_errors["res/a"] = [503, 500]

    report = baseline(source, destination, {"res/a": b"alpha"})

    assert (report.downloaded, report.failed) == (1, 0)
    assert len(source.requested("res/a")) == 3


def test_persistent_server_error_fails_the_resource_clearly(
    source: Source, destination: Path
) -> None:
    source.planned_errors["res/a"] = [503] * 3

    report = baseline(source, destination, {"res/a": b"alpha", "res/b": b"bravo"})

    assert report.downloaded == 1
    assert [f.uri for f in report.failures] == [source.url("res/a")]
    assert "HTTP 503 (gave up after 3 attempts)" in report.failures[0].reason


def test_unreachable_source_retries_then_fails_clearly(destination: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = config_from_mapping(
        {
            "capability_list_url": f"http://127.0.0.1:{port}/capabilitylist.xml",
            "destination": str(destination),
            "retries": 2,
            "backoff": 0.001,
        },
        base_dir=destination.parent,
    )

    with pytest.raises(HarvestError, match=r"ConnectError.*gave up after 3 attempts"):
        run_harvest(config, Mode.BASELINE)


def test_symlink_in_destination_is_not_followed(
    source: Source, destination: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    destination.mkdir()
    (destination / f"127.0.0.1_{source.port}").symlink_to(outside)

    report = baseline(source, destination, {"res/a": b"alpha"})

    assert [f.uri for f in report.failures] == [source.url("res/a")]
    assert "symbolic link" in report.failures[0].reason
    assert list(outside.iterdir()) == []


def test_bearer_token_is_sent_to_the_source(source: Source, destination: Path) -> None:
    source.token = "s3cret"

    report = baseline(source, destination, {"res/a": b"alpha"}, bearer_token="s3cret")

    assert (report.downloaded, report.failed) == (1, 0)
    with pytest.raises(HarvestError, match="HTTP 401"):
        run_harvest(make_config(source, destination), Mode.BASELINE)


# --- Command and task -----------------------------------------------------------


def write_config(tmp_path: Path, source: Source, destination: Path) -> Path:
    path = tmp_path / "harvest.yaml"
    path.write_text(
        f"capability_list_url: {source.url('capabilitylist.xml')}\n"
        f"destination: {destination.name}\n"
        "retries: 1\nbackoff: 0.001\n"
    )
    return path


def test_command_runs_baseline_then_incremental(
    source: Source, destination: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    resources = [source.resource("a", b"a v1"), source.resource("b", b"b v1")]
    source.capability_list(
        resourcelist=resource_list(source, resources),
        changelist=change_list(source, "changelist.xml", [], since=AT),
    )
    config = write_config(tmp_path, source, destination)
    out = io.StringIO()

    call_command("harvest", str(config), stdout=out)
    call_command("harvest", str(config), stdout=out)

    first, second = out.getvalue().splitlines()
    assert first.startswith("baseline: downloaded 2, deleted 0, skipped 0, failed 0")
    assert second.startswith("incremental: downloaded 0")
    assert copy_of(source, destination, "a").read_bytes() == b"a v1"


def test_command_fails_on_failures(source: Source, destination: Path, tmp_path: Path) -> None:
    resources = [source.resource("a", b"listed")]
    source.capability_list(resourcelist=resource_list(source, resources))
    source.planned_errors["a"] = [403]
    err = io.StringIO()

    with pytest.raises(CommandError, match="1 failed"):
        call_command(
            "harvest",
            str(write_config(tmp_path, source, destination)),
            "--baseline",
            stdout=io.StringIO(),
            stderr=err,
        )

    assert f"FAILED {source.url('a')}" in err.getvalue()


def test_command_names_the_bad_config_key(tmp_path: Path) -> None:
    config = tmp_path / "harvest.yaml"
    config.write_text("destination: mirror\n")

    with pytest.raises(CommandError, match="capability_list_url"):
        call_command("harvest", str(config))


def test_task_runs_the_harvest(source: Source, destination: Path, tmp_path: Path) -> None:
    resources = [source.resource("a", b"a v1")]
    source.capability_list(resourcelist=resource_list(source, resources))

    result = harvest.apply(
        args=[str(write_config(tmp_path, source, destination)), "baseline"]
    ).get()

    assert (result["ok"], result["downloaded"], result["failed"]) == (True, 1, 0)
    assert copy_of(source, destination, "a").read_bytes() == b"a v1"


def test_resource_without_length_or_hash_is_capped_with_a_clear_failure(
    source: Source, destination: Path, tmp_path: Path
) -> None:
    """Nothing bounds an unlisted length but the configured cap."""
    source.put("big", b"x" * 5000)
    source.put("small", b"y" * 10)
    resources = [Resource(uri=source.url(name), lastmod=AT) for name in ("big", "small")]
    source.capability_list(resourcelist=resource_list(source, resources))
    config = write_config(tmp_path, source, destination)
    config.write_text(config.read_text() + "max_resource_bytes: 1000\n")
    err = io.StringIO()

    with pytest.raises(CommandError, match="1 failed"):
        call_command("harvest", str(config), "--baseline", stdout=io.StringIO(), stderr=err)

    assert f"FAILED {source.url('big')}: larger than the limit of 1000 bytes" in err.getvalue()
    assert "max_resource_bytes" in err.getvalue()
    assert not copy_of(source, destination, "big").exists()
    assert copy_of(source, destination, "small").read_bytes() == b"y" * 10


def test_an_undated_change_in_a_package_read_keeps_a_failed_packages_failure(
    source: Source, destination: Path
) -> None:
    """cd1's undated u v2 and the list's dated u v3 (standing in for cd2) cannot be
    ordered but by position, where the list's came first: v2 won, the run said ok and the
    sync point moved past v3, lost for good."""
    baseline(source, destination, {"u": b"u v1"})
    u2 = (described(source.url("u"), b"u v2", change="updated", path="/changes/u2"), b"u v2")
    u3 = described(
        source.url("u"),
        b"u v3",
        change="updated",
        datetime="2024-01-02T12:00:00Z",
        path="/changes/u3",
    )
    packages = [
        change_package(source, "cd1.zip", AT, "2024-01-02T00:00:00Z", [u2]),
        change_package(
            source,
            "cd2.zip",
            "2024-01-02T00:00:00Z",
            "2024-01-03T00:00:00Z",
            [(u3, b"u v3")],
            b"not a ZIP",
        ),
    ]
    source.put("u", b"u v3")
    listing = change_list(source, "changelist.xml", [u3], since="2024-01-02T00:00:00Z")
    source.capability_list(
        resourcelist=source.url("resourcelist.xml"),
        changelist=listing,
        changedump=change_dump(source, packages),
    )

    report = run_harvest(make_config(source, destination), Mode.INCREMENTAL, now=NOW)

    [failure] = report.failures
    assert failure.uri == source.url("cd2.zip")
    assert failure.reason.endswith("; a package read holds changes without a datetime")
    assert load_state(destination, source.url("capabilitylist.xml")).synced_until == utc(AT)
