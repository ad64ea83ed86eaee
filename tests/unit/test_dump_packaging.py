"""One dump package, without Django: planning under the limits, checked bitstreams, reuse."""

from __future__ import annotations

import hashlib
import io
import zipfile
from datetime import UTC, datetime

import pytest

from sitemaps.dumps import packaging
from sitemaps.dumps.packaging import (
    BitstreamChanged,
    Item,
    Limits,
    PreviousPackage,
    Reuse,
    plan_package,
    write_package,
)
from sitemaps.dumps.ranges import ByteRange, Unsatisfiable, if_range_holds, requested_range
from sitemaps.protocol.builders import build_resource_dump_manifest, resource_entry
from sources.generators.base import ResourceRecord, ResourceUnreadable

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
CAPABILITY_LIST = "http://example.org/capabilitylist.xml"


def record(key: int, data: bytes) -> ResourceRecord:
    return ResourceRecord(
        key=key,
        uri=f"http://example.org/r{key}",
        lastmod=AT,
        length=len(data),
        md5=hashlib.md5(data, usedforsecurity=False).hexdigest(),
        mime="text/plain",
        sha256=hashlib.sha256(data).hexdigest(),
    )


def render(item: Item) -> bytes:
    return resource_entry(item.record, path=item.path)  # type: ignore[arg-type]


def manifest(items: list[Item]) -> bytes:
    return build_resource_dump_manifest(
        [(item.record, item.path) for item in items], at=AT, capability_list_url=CAPABILITY_LIST
    ).content


def items_for(files: dict[int, bytes]) -> list[Item]:
    return [Item(record(key, data), f"/resources/r{key}") for key, data in files.items()]


def opener(files: dict[str, bytes]):
    def open_bitstream(record: ResourceRecord):
        if record.uri not in files:
            raise ResourceUnreadable("its file is missing")
        return io.BytesIO(files[record.uri])

    return open_bitstream


def package(items: list[Item], files: dict[str, bytes], **options) -> tuple[bytes, object]:
    target = io.BytesIO()
    written = write_package(
        target, items, open_bitstream=opener(files), build_manifest=manifest, **options
    )
    return target.getvalue(), written


LIMITS = Limits(entries=3, package_bytes=10_000, manifest_bytes=50_000)


def test_a_package_closes_at_its_bitstream_limit() -> None:
    planned = plan_package(items_for({n: b"x" for n in range(5)}), LIMITS, render)
    assert [item.record.key for item in planned.items] == [0, 1, 2]
    assert planned.has_more and planned.following.record.key == 3


def test_a_package_closes_before_its_byte_limit_but_takes_one_large_resource() -> None:
    sizes = {0: 3000, 1: 3000, 2: 3000}
    planned = plan_package(items_for({k: b"x" * n for k, n in sizes.items()}), LIMITS, render)
    assert [item.record.key for item in planned.items] == [0, 1]
    alone = plan_package(items_for({7: b"x" * 20_000, 8: b"y"}), LIMITS, render)
    assert [item.record.key for item in alone.items] == [7]


def test_a_package_closes_before_its_manifest_outgrows_the_document_limit() -> None:
    limits = Limits(entries=1000, package_bytes=10**9, manifest_bytes=2048 + 3 * 400)
    planned = plan_package(items_for({n: b"x" for n in range(20)}), limits, render)
    assert 1 <= len(planned.items) < 20 and planned.has_more
    size = len(manifest(planned.items))
    assert size <= limits.manifest_bytes


def test_bitstreams_are_checked_and_what_differs_is_left_out() -> None:
    good, other = b"good bytes", b"other bytes"
    items = items_for({1: good, 2: good, 3: good})
    files = {"http://example.org/r1": good, "http://example.org/r2": b"bad bytes!"}
    data, written = package(items, files)
    archive = zipfile.ZipFile(io.BytesIO(data))
    assert archive.namelist() == ["resources/r1", "manifest.xml"]
    assert archive.read("resources/r1") == good
    assert [(s.uri, s.reason) for s in written.skipped] == [
        (
            "http://example.org/r2",
            "its file's md5 differs from the record (changed since its last event?)",
        ),
        ("http://example.org/r3", "its file is missing"),
    ]
    assert b"http://example.org/r2" not in archive.read("manifest.xml")
    assert other not in data


def test_large_files_are_hashed_before_they_are_copied(monkeypatch) -> None:
    monkeypatch.setattr(packaging, "SMALL_FILE_BYTES", 4)
    data = b"a large file" * 1000
    changed = b"A large file" * 1000
    items = items_for({1: data, 2: data})
    files = {"http://example.org/r1": data, "http://example.org/r2": changed}
    content, written = package(items, files)
    archive = zipfile.ZipFile(io.BytesIO(content))
    assert archive.read("resources/r1") == data
    assert "resources/r2" not in archive.namelist()
    assert len(written.skipped) == 1


class ChangesAfterSeek(io.BytesIO):
    """A file rewritten between the check and the copy."""

    def seek(self, offset: int, whence: int = 0) -> int:
        self.write(b"!")  # overwrites the first byte
        return super().seek(offset, whence)


def test_a_large_file_that_changes_mid_copy_raises(monkeypatch) -> None:
    monkeypatch.setattr(packaging, "SMALL_FILE_BYTES", 4)
    data = b"a large file" * 100
    (item,) = items_for({1: data})
    with pytest.raises(BitstreamChanged):
        write_package(
            io.BytesIO(),
            [item],
            open_bitstream=lambda _record: ChangesAfterSeek(data),
            build_manifest=manifest,
        )
    _, written = package([item], {}, leave_out=frozenset({item.path}))
    assert written.skipped[0].reason == "its file changed while it was being packaged"


def test_bitstreams_of_the_previous_package_are_copied_not_read() -> None:
    old = {1: b"one", 2: b"two"}
    first, _ = package(items_for(old), {f"http://example.org/r{k}": v for k, v in old.items()})
    previous = PreviousPackage(io.BytesIO(first))
    new = {1: b"one", 2: b"two, version 2", 3: b"three"}
    files = {"http://example.org/r2": new[2], "http://example.org/r3": new[3]}  # r1's file is gone
    content, written = package(items_for(new), files, reuse=Reuse([previous]))
    archive = zipfile.ZipFile(io.BytesIO(content))
    assert {name: archive.read(name) for name in archive.namelist() if name != "manifest.xml"} == {
        "resources/r1": b"one",
        "resources/r2": b"two, version 2",
        "resources/r3": b"three",
    }
    assert written.reused == 1 and not written.skipped


def test_identical_input_gives_identical_packages() -> None:
    files = {"http://example.org/r1": b"one"}
    assert package(items_for({1: b"one"}), files)[0] == package(items_for({1: b"one"}), files)[0]


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("bytes=0-9", ByteRange(0, 9)),
        ("bytes=90-", ByteRange(90, 99)),
        ("bytes=90-500", ByteRange(90, 99)),
        ("bytes=-10", ByteRange(90, 99)),
        ("bytes=-500", ByteRange(0, 99)),
        ("bytes=5-2", None),
        ("bytes=0-1,5-6", None),
        ("items=0-1", None),
        ("bytes=-", None),
    ],
)
def test_byte_ranges(header: str, expected: ByteRange | None) -> None:
    assert requested_range(header, 100) == expected


@pytest.mark.parametrize("header", ["bytes=100-", "bytes=-0", "bytes=200-300"])
def test_unsatisfiable_ranges(header: str) -> None:
    with pytest.raises(Unsatisfiable):
        requested_range(header, 100)


def test_if_range_needs_the_current_version() -> None:
    assert if_range_holds(None, '"a"', 0)
    assert if_range_holds('"a"', '"a"', 0)
    assert not if_range_holds('W/"a"', '"a"', 0)
    assert not if_range_holds('"b"', '"a"', 0)
    assert if_range_holds("Thu, 01 Jan 1970 00:00:10 GMT", '"a"', 10)
    assert not if_range_holds("Thu, 01 Jan 1970 00:00:11 GMT", '"a"', 10)
