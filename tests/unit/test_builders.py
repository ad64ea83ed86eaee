"""Document builders: valid against the official XSD, readable by resync, split at the limits."""

from __future__ import annotations

import io
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import resync
from lxml import etree
from resync.change_dump_manifest import ChangeDumpManifest
from resync.resource_container import ResourceContainer
from resync.sitemap import Sitemap

from sitemaps.protocol.builders import (
    CapabilityEntry,
    CapabilityListRef,
    ChangeDumpPackage,
    ChangeListPart,
    DocumentPage,
    DocumentTooLarge,
    PageBuilder,
    ResourceDumpPackage,
    ResourceListPart,
    append_change_list,
    build_capability_list,
    build_change_dump,
    build_change_dump_manifest,
    build_change_list,
    build_change_list_index,
    build_change_notification,
    build_resource_dump,
    build_resource_dump_manifest,
    build_resource_entries,
    build_resource_list,
    build_resource_list_index,
    build_source_description,
    change_entry,
    change_list_entries,
    join_parts,
    resource_entry,
    resource_list_frame,
)
from sitemaps.protocol.constants import (
    MAX_DOCUMENT_BYTES,
    MAX_ENTRIES_PER_DOCUMENT,
    RS_NS,
    SITEMAP_NS,
    w3c_datetime,
)
from sitemaps.protocol.records import ChangeRecord, Link, ResourceBatch, ResourceRecord
from sitemaps.protocol.writer import resource_url, resource_urls, schema_type
from validator.schema import XSD_DIR as SHIPPED_XSD_DIR

from .test_writer import columns_of

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
XSD_DIR = SHIPPED_XSD_DIR
S = f"{{{SITEMAP_NS}}}"
RS = f"{{{RS_NS}}}"

BASE = "http://example.com/dataset1"
CAPABILITY_LIST = f"{BASE}/capabilitylist.xml"
MD5 = "1584abdf8ebdc9802ac0c6a7402c03b6"
SHA256 = "854f61290e2e197a11bc91063afce22e43f8ccc655237050ace766adc68dc784"


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def resource(key: int, **fields: object) -> ResourceRecord:
    values: dict[str, object] = {
        "key": key,
        "uri": f"http://example.com/res{key}",
        "lastmod": utc(2013, 1, 2, 13, 0) + timedelta(minutes=key),
        "length": 1000 + key,
        "md5": MD5,
        "mime": "text/html",
    }
    values.update(fields)
    return ResourceRecord(**values)  # type: ignore[arg-type]


def change(key: int, kind: str = "updated", **fields: object) -> ChangeRecord:
    values: dict[str, object] = {
        "key": key,
        "resource_key": key,
        "uri": f"http://example.com/res{key}",
        "change": kind,
        "datetime": utc(2013, 1, 3, 0, 0) + timedelta(minutes=key),
    }
    if kind != "deleted":
        values.update(lastmod=utc(2013, 1, 2, 23, 0), length=100 + key, md5=MD5, mime="text/plain")
    values.update(fields)
    return ChangeRecord(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def urlset_schema() -> etree.XMLSchema:
    return etree.XMLSchema(etree.parse(str(XSD_DIR / "rs-urlset.xsd")))


@pytest.fixture(scope="module")
def sitemapindex_schema() -> etree.XMLSchema:
    return etree.XMLSchema(etree.parse(str(XSD_DIR / "rs-sitemapindex.xsd")))


def resync_parse(content: bytes) -> tuple[Sitemap, ResourceContainer]:
    """Parse with resync's own reader, as a Destination would; it tells an index by its root."""
    sitemap = Sitemap()
    container = sitemap.parse_xml(fh=io.BytesIO(content))
    return sitemap, container


def entry_md(content: bytes) -> list[dict[str, str]]:
    """Each entry's `rs:md` attributes (resync does not read an entry's time attributes)."""
    document = etree.fromstring(content)
    return [dict(md.attrib) for md in document.iterfind(f"{S}*/{RS}md")]


def golden(name: str) -> bytes:
    """A golden file with its layout whitespace removed, as lxml serializes it."""
    parser = etree.XMLParser(remove_blank_text=True, remove_comments=True)
    tree = etree.parse(str(DATA_DIR / name), parser)
    return etree.tostring(tree, xml_declaration=True, encoding="UTF-8")


# W3C datetimes


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (utc(2013, 1, 3, 9, 0), "2013-01-03T09:00:00Z"),
        (datetime(2013, 1, 3, 9, 0, 0, 250000, tzinfo=UTC), "2013-01-03T09:00:00.25Z"),
        (datetime(2013, 1, 3, 9, 0, 0, 1, tzinfo=UTC), "2013-01-03T09:00:00.000001Z"),
        (datetime(2013, 1, 3, 10, 0, tzinfo=timezone(timedelta(hours=1))), "2013-01-03T09:00:00Z"),
        (datetime(2013, 1, 3, 4, 0, tzinfo=ZoneInfo("America/New_York")), "2013-01-03T09:00:00Z"),
        (datetime(2013, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=2))), "2012-12-31T22:30:00Z"),
        (datetime(2013, 7, 1, 9, 0, tzinfo=ZoneInfo("Europe/London")), "2013-07-01T08:00:00Z"),
        (datetime(2013, 1, 3, 9, 0, tzinfo=ZoneInfo("UTC")), "2013-01-03T09:00:00Z"),
        (utc(999, 1, 1, 0, 0), "0999-01-01T00:00:00Z"),
    ],
)
def test_w3c_datetime_is_utc_with_z(value: datetime, expected: str) -> None:
    assert w3c_datetime(value) == expected


def test_w3c_datetime_refuses_naive_times_and_dates() -> None:
    with pytest.raises(ValueError, match="naive"):
        w3c_datetime(datetime(2013, 1, 3, 9, 0))
    with pytest.raises(TypeError):
        w3c_datetime(date(2013, 1, 3))  # type: ignore[arg-type]


def test_builders_refuse_naive_times() -> None:
    with pytest.raises(ValueError, match="naive"):
        build_resource_list([], at=datetime(2013, 1, 3), capability_list_url=CAPABILITY_LIST)
    with pytest.raises(ValueError, match="naive"):
        build_resource_list(
            [resource(1, lastmod=datetime(2013, 1, 2))],
            at=utc(2013, 1, 3),
            capability_list_url=CAPABILITY_LIST,
        )


# Golden documents


def test_resource_list_matches_golden_file() -> None:
    page = build_resource_list(
        [
            resource(1, lastmod=utc(2013, 1, 2, 13, 0), length=8876),
            resource(
                2,
                uri="http://example.com/res2?a=1&b=2",
                lastmod=datetime(
                    2013, 1, 2, 15, 0, 30, 250000, tzinfo=timezone(timedelta(hours=1))
                ),
                length=14599,
                md5="1e0d5cb8ef6ba40c99b14c0237be735e",
                sha256=SHA256,
                mime="application/pdf",
                links=(
                    Link("duplicate", "http://mirror.example.com/res2"),
                    Link("describedby", "http://example.com/res2/meta.xml", "application/xml"),
                ),
            ),
            resource(3, lastmod=utc(2013, 1, 2, 14, 0), length=0, md5="", mime=""),
        ],
        at=utc(2013, 1, 3, 9, 0),
        completed=utc(2013, 1, 3, 9, 1, 30),
        capability_list_url=CAPABILITY_LIST,
        index_url=f"{BASE}/resourcelist-index.xml",
    )

    assert page.content == golden("resource_list.xml")
    assert (page.entries, page.has_more) == (3, False)
    assert page.last_record is not None and page.last_record.key == 3


def test_change_list_matches_golden_file() -> None:
    page = build_change_list(
        [
            change(
                1,
                "created",
                datetime=utc(2013, 1, 3, 10, 0),
                lastmod=utc(2013, 1, 3, 10, 0),
                length=8876,
                mime="text/html",
            ),
            change(
                2,
                datetime=utc(2013, 1, 3, 11, 0),
                length=14599,
                md5="1e0d5cb8ef6ba40c99b14c0237be735e",
                mime="application/pdf",
                links=(Link("alternate", "http://example.com/res2.html", "text/html"),),
            ),
            change(3, "deleted", datetime=utc(2013, 1, 3, 18, 0)),
        ],
        since=utc(2013, 1, 3),
        until=utc(2013, 1, 4),
        capability_list_url=CAPABILITY_LIST,
        index_url=f"{BASE}/changelist-index.xml",
    )

    assert page.content == golden("change_list.xml")


# Every document type: official XSD, lxml and resync


def test_resource_list_is_valid_and_reads_back_in_resync(urlset_schema: etree.XMLSchema) -> None:
    records = [resource(1), resource(2, sha256=SHA256), resource(3, mime="", md5="")]
    content = build_resource_list(
        records, at=utc(2013, 1, 3, 9), capability_list_url=CAPABILITY_LIST
    ).content

    urlset_schema.assertValid(etree.fromstring(content))
    parsed = resync.ResourceList()
    parsed.parse(str_data=content.decode())
    assert parsed.md["capability"] == "resourcelist"
    assert parsed.md["md_at"] == "2013-01-03T09:00:00Z"
    assert parsed.link_href("up") == CAPABILITY_LIST
    by_uri = {item.uri: item for item in parsed}
    for record in records:
        item = by_uri[record.uri]
        assert item.lastmod == w3c_datetime(record.lastmod)
        assert item.length == record.length
        assert item.md5 == (record.md5 or None)
        assert item.sha256 == (record.sha256 or None)
        assert item.mime_type == (record.mime or None)


def test_change_list_is_valid_and_reads_back_in_resync(urlset_schema: etree.XMLSchema) -> None:
    records = [change(1, "created"), change(2), change(3, "deleted")]
    content = build_change_list(
        records, since=utc(2013, 1, 3), capability_list_url=CAPABILITY_LIST
    ).content

    urlset_schema.assertValid(etree.fromstring(content))
    parsed = resync.ChangeList()
    parsed.parse(str_data=content.decode())
    assert parsed.md["md_from"] == "2013-01-03T00:00:00Z"
    assert "md_until" not in parsed.md  # open list
    items = list(parsed)
    assert [(item.uri, item.change) for item in items] == [
        (record.uri, record.change) for record in records
    ]
    for item, record in zip(items, records, strict=True):
        assert item.datetime == w3c_datetime(record.datetime)
        assert item.lastmod == (record.lastmod and w3c_datetime(record.lastmod))
        assert item.length == record.length
        assert item.md5 == (record.md5 or None)
        assert item.mime_type == (record.mime or None)


def test_resource_list_index_is_an_index(sitemapindex_schema: etree.XMLSchema) -> None:
    content = build_resource_list_index(
        [
            ResourceListPart(f"{BASE}/resourcelist1.xml", at=utc(2013, 1, 3, 9, 0)),
            ResourceListPart(
                f"{BASE}/resourcelist2.xml",
                at=utc(2013, 1, 3, 9, 3),
                completed=utc(2013, 1, 3, 9, 7),
            ),
        ],
        at=utc(2013, 1, 3, 9, 0),
        completed=utc(2013, 1, 3, 9, 10),
        capability_list_url=CAPABILITY_LIST,
    )

    sitemapindex_schema.assertValid(etree.fromstring(content))
    sitemap, container = resync_parse(content)
    assert sitemap.parsed_index is True
    assert container.md == {
        "capability": "resourcelist",
        "md_at": "2013-01-03T09:00:00Z",
        "md_completed": "2013-01-03T09:10:00Z",
    }
    assert container.link_href("up") == CAPABILITY_LIST
    assert [part.uri for part in container] == [
        f"{BASE}/resourcelist1.xml",
        f"{BASE}/resourcelist2.xml",
    ]
    assert entry_md(content) == [
        {"at": "2013-01-03T09:00:00Z"},
        {"at": "2013-01-03T09:03:00Z", "completed": "2013-01-03T09:07:00Z"},
    ]


def test_change_list_index_marks_only_closed_parts_with_until(
    sitemapindex_schema: etree.XMLSchema,
) -> None:
    content = build_change_list_index(
        [
            ChangeListPart(f"{BASE}/changelist1.xml", utc(2013, 1, 1), utc(2013, 1, 2)),
            ChangeListPart(f"{BASE}/changelist2.xml", utc(2013, 1, 2)),
        ],
        since=utc(2013, 1, 1),
        capability_list_url=CAPABILITY_LIST,
    )

    sitemapindex_schema.assertValid(etree.fromstring(content))
    sitemap, container = resync_parse(content)
    assert sitemap.parsed_index is True
    assert container.md == {"capability": "changelist", "md_from": "2013-01-01T00:00:00Z"}
    assert [part.uri for part in container] == [
        f"{BASE}/changelist1.xml",
        f"{BASE}/changelist2.xml",
    ]
    assert entry_md(content) == [
        {"from": "2013-01-01T00:00:00Z", "until": "2013-01-02T00:00:00Z"},
        {"from": "2013-01-02T00:00:00Z"},
    ]


def test_change_list_index_refuses_bad_order_and_open_parts_in_the_middle() -> None:
    with pytest.raises(ValueError, match="oldest first"):
        build_change_list_index(
            [
                ChangeListPart("http://example.com/b.xml", utc(2013, 1, 2), utc(2013, 1, 3)),
                ChangeListPart("http://example.com/a.xml", utc(2013, 1, 1), utc(2013, 1, 2)),
            ],
            since=utc(2013, 1, 1),
            capability_list_url=CAPABILITY_LIST,
        )
    with pytest.raises(ValueError, match="open"):
        build_change_list_index(
            [
                ChangeListPart("http://example.com/a.xml", utc(2013, 1, 1)),
                ChangeListPart("http://example.com/b.xml", utc(2013, 1, 2)),
            ],
            since=utc(2013, 1, 1),
            capability_list_url=CAPABILITY_LIST,
        )


def test_capability_list(urlset_schema: etree.XMLSchema) -> None:
    content = build_capability_list(
        [
            CapabilityEntry("resourcelist", f"{BASE}/resourcelist-index.xml"),
            CapabilityEntry("changelist", f"{BASE}/changelist-index.xml"),
            CapabilityEntry(
                "change-notification",
                f"{BASE}/notifications/changes",
                links=(Link("hub", "http://hub.example.com/"),),
            ),
        ],
        source_description_url="http://example.com/.well-known/resourcesync",
        describedby_url="http://example.com/info_about_set1_of_resources.xml",
    )

    urlset_schema.assertValid(etree.fromstring(content))
    parsed = resync.CapabilityList()
    parsed.parse(str_data=content.decode())
    assert parsed.md == {"capability": "capabilitylist"}
    assert parsed.link_href("up") == "http://example.com/.well-known/resourcesync"
    assert parsed.link_href("describedby") == "http://example.com/info_about_set1_of_resources.xml"
    assert [(item.capability, item.uri) for item in parsed] == [
        ("resourcelist", f"{BASE}/resourcelist-index.xml"),
        ("changelist", f"{BASE}/changelist-index.xml"),
        ("change-notification", f"{BASE}/notifications/changes"),
    ]
    topic = list(parsed)[2]
    assert topic.link_href("hub") == "http://hub.example.com/"


def test_capability_list_refuses_a_capability_twice() -> None:
    with pytest.raises(ValueError, match="twice"):
        build_capability_list(
            [
                CapabilityEntry("resourcelist", "http://example.com/a.xml"),
                CapabilityEntry("resourcelist", "http://example.com/b.xml"),
            ],
            source_description_url="http://example.com/.well-known/resourcesync",
        )


def test_source_description(urlset_schema: etree.XMLSchema) -> None:
    content = build_source_description(
        [
            CapabilityListRef(CAPABILITY_LIST, describedby_url=f"{BASE}/about.xml"),
            CapabilityListRef("http://example.com/dataset2/capabilitylist.xml"),
        ],
        describedby_url="http://example.com/info-about-source.xml",
    )

    urlset_schema.assertValid(etree.fromstring(content))
    parsed = resync.SourceDescription()
    parsed.parse(str_data=content.decode())
    assert parsed.md == {"capability": "description"}
    assert parsed.link_href("describedby") == "http://example.com/info-about-source.xml"
    items = sorted(parsed, key=lambda item: item.uri)
    assert [(item.uri, item.capability) for item in items] == [
        (CAPABILITY_LIST, "capabilitylist"),
        ("http://example.com/dataset2/capabilitylist.xml", "capabilitylist"),
    ]
    assert items[0].link_href("describedby") == f"{BASE}/about.xml"
    assert b"<lastmod>" not in content


def test_resource_dump_and_manifest(urlset_schema: etree.XMLSchema) -> None:
    dump = build_resource_dump(
        [
            ResourceDumpPackage(
                f"{BASE}/part1.zip",
                length=4765,
                md5=MD5,
                at=utc(2013, 1, 3, 9),
                completed=utc(2013, 1, 3, 9, 2),
                manifest_url=f"{BASE}/part1-manifest.xml",
            )
        ],
        at=utc(2013, 1, 3, 9),
        capability_list_url=CAPABILITY_LIST,
    )
    manifest = build_resource_dump_manifest(
        [(resource(1), "/resources/res1"), (resource(2), "/resources/res2")],
        at=utc(2013, 1, 3, 9),
        capability_list_url=CAPABILITY_LIST,
    )

    for content in (dump, manifest.content):
        urlset_schema.assertValid(etree.fromstring(content))
    parsed_dump = resync.ResourceDump()
    parsed_dump.parse(str_data=dump.decode())
    (package,) = list(parsed_dump)
    assert (package.length, package.mime_type, package.md5) == (4765, "application/zip", MD5)
    assert entry_md(dump)[0]["at"] == "2013-01-03T09:00:00Z"
    assert entry_md(dump)[0]["completed"] == "2013-01-03T09:02:00Z"
    assert package.link("contents") == {
        "rel": "contents",
        "href": f"{BASE}/part1-manifest.xml",
        "mime_type": "application/xml",
    }
    parsed_manifest = resync.ResourceDumpManifest()
    parsed_manifest.parse(str_data=manifest.content.decode())
    assert sorted(item.path for item in parsed_manifest) == ["/resources/res1", "/resources/res2"]


def test_change_dump_and_manifest(urlset_schema: etree.XMLSchema) -> None:
    dump = build_change_dump(
        [
            ChangeDumpPackage(
                f"{BASE}/changes1.zip",
                length=2048,
                since=utc(2013, 1, 3),
                until=utc(2013, 1, 4),
                manifest_url=f"{BASE}/changes1-manifest.xml",
            )
        ],
        since=utc(2013, 1, 3),
        capability_list_url=CAPABILITY_LIST,
    )
    manifest = build_change_dump_manifest(
        [
            (change(1, "created"), "/changes/res1"),
            (change(2), "/changes/res2"),
            (change(3, "deleted"), ""),
        ],
        since=utc(2013, 1, 3),
        until=utc(2013, 1, 4),
        capability_list_url=CAPABILITY_LIST,
    )

    for content in (dump, manifest.content):
        urlset_schema.assertValid(etree.fromstring(content))
    parsed_dump = resync.ChangeDump()
    parsed_dump.parse(str_data=dump.decode())
    (package,) = list(parsed_dump)
    assert (package.uri, package.length) == (f"{BASE}/changes1.zip", 2048)
    assert entry_md(dump)[0]["from"] == "2013-01-03T00:00:00Z"
    assert entry_md(dump)[0]["until"] == "2013-01-04T00:00:00Z"
    parsed_manifest = ChangeDumpManifest()
    parsed_manifest.parse(str_data=manifest.content.decode())
    assert [(item.change, item.path) for item in parsed_manifest] == [
        ("created", "/changes/res1"),
        ("updated", "/changes/res2"),
        ("deleted", None),
    ]


@pytest.mark.parametrize("path", ["", "res1", "/", "/dir/"])
def test_manifest_paths_must_name_a_file_from_the_root(path: str) -> None:
    with pytest.raises(ValueError, match="path"):
        build_resource_dump_manifest(
            [(resource(1), path)], at=utc(2013, 1, 3), capability_list_url=CAPABILITY_LIST
        )


def test_change_dump_manifest_refuses_a_path_on_deleted_changes() -> None:
    with pytest.raises(ValueError, match="deleted"):
        build_change_dump_manifest(
            [(change(1, "deleted"), "/changes/res1")],
            since=utc(2013, 1, 3),
            capability_list_url=CAPABILITY_LIST,
        )


def test_change_notification_has_from_and_until(urlset_schema: etree.XMLSchema) -> None:
    content = build_change_notification(
        [change(1, "created"), change(2, "deleted")],
        since=utc(2013, 1, 3),
        until=utc(2013, 1, 3, 0, 5),
        capability_list_url=CAPABILITY_LIST,
    )

    urlset_schema.assertValid(etree.fromstring(content))
    _, container = resync_parse(content)
    assert container.md == {
        "capability": "change-notification",
        "md_from": "2013-01-03T00:00:00Z",
        "md_until": "2013-01-03T00:05:00Z",
    }
    assert [item.change for item in container] == ["created", "deleted"]


# Change order and windows


def test_changes_must_be_oldest_first_and_inside_the_window() -> None:
    since, until = utc(2013, 1, 3), utc(2013, 1, 4)
    late = change(2, datetime=utc(2013, 1, 3, 5))
    early = change(1, datetime=utc(2013, 1, 3, 1))

    with pytest.raises(ValueError, match="out of order"):
        build_change_list([late, early], since=since, capability_list_url=CAPABILITY_LIST)
    with pytest.raises(ValueError, match="before from"):
        build_change_list(
            [change(1, datetime=utc(2013, 1, 2))], since=since, capability_list_url=CAPABILITY_LIST
        )
    with pytest.raises(ValueError, match="after until"):
        build_change_list(
            [change(1, datetime=utc(2013, 1, 5))],
            since=since,
            until=until,
            capability_list_url=CAPABILITY_LIST,
        )
    with pytest.raises(ValueError, match="before from"):
        build_change_list([], since=until, until=since, capability_list_url=CAPABILITY_LIST)


def test_window_bounds_are_inclusive() -> None:
    since, until = utc(2013, 1, 3), utc(2013, 1, 4)
    page = build_change_list(
        [change(1, datetime=since), change(2, datetime=since), change(3, datetime=until)],
        since=since,
        until=until,
        capability_list_url=CAPABILITY_LIST,
    )

    assert page.entries == 3


def test_unknown_change_type_is_refused() -> None:
    with pytest.raises(ValueError, match="created, updated or deleted"):
        change_entry(change(1, "moved"))


# Media types the 1.1 schema's `[\w-]+/[\w-]+` cannot express (its \w takes `+`, not `.`
# or `_`): written without parameters, or left out, so every document stays valid.


@pytest.mark.parametrize(
    ("mime", "written"),
    [
        ("image/svg+xml", "image/svg+xml"),
        ("text/html; charset=utf-8", "text/html"),
        ("application/vnd.ms-excel", None),
        ("text/x_y", None),
        ('text/x-"quoted"&<x>', None),
    ],
)
def test_media_types_are_written_as_the_schema_takes_them(
    mime: str, written: str | None, urlset_schema: etree.XMLSchema
) -> None:
    link = Link("alternate", "http://example.com/a", mime)
    record = resource(1, mime=mime, links=(link,))
    documents = [
        build_resource_list([record], at=utc(2013, 1, 3), capability_list_url=CAPABILITY_LIST),
        build_change_list(
            [change(1, mime=mime, links=(link,))],
            since=utc(2013, 1, 3),
            capability_list_url=CAPABILITY_LIST,
        ),
        build_resource_dump_manifest(
            [(record, "/resources/r1")], at=utc(2013, 1, 3), capability_list_url=CAPABILITY_LIST
        ),
    ]
    for page in documents:
        document = etree.fromstring(page.content)
        urlset_schema.assertValid(document)
        assert document.find(f"{S}url/{RS}md").get("type") == written
        assert document.find(f"{S}url/{RS}ln").get("type") == written
    # A generator's columns are written as its records are (or left to them: a type left out).
    records = [record, resource(2, mime=mime, links=(link,))]
    batch = resource_urls(columns_of(records))
    assert batch == (b"".join(map(resource_url, records)) if written else None)


#: Characters around the schema's pattern: ASCII, and where Python's and libxml2's Unicode
#: tables could disagree (marks, symbols, other scripts' digits and letters).
TRICKY = [chr(c) for c in range(0x20, 0x7F)] + list("éß日٣\u0301\u166d\u17b4\u23b4\u2028\uff0e")


@pytest.mark.parametrize("character", TRICKY)
def test_a_media_type_written_as_is_is_one_the_schema_takes(
    character: str, urlset_schema: etree.XMLSchema
) -> None:
    mime = f"text/x{character}y"
    written = schema_type(mime)
    content = build_resource_list(
        [resource(1, mime=mime)], at=utc(2013, 1, 3), capability_list_url=CAPABILITY_LIST
    ).content

    assert written in ("", mime.split(";")[0].strip())
    urlset_schema.assertValid(etree.fromstring(content))


def test_an_empty_change_list_is_still_a_change_list() -> None:
    """No changes yet is a valid state; the Sitemap XSD wants one <url>, readers do not."""
    page = build_change_list([], since=utc(2013, 1, 3), capability_list_url=CAPABILITY_LIST)

    parsed = resync.ChangeList()
    parsed.parse(str_data=page.content.decode())
    assert (page.entries, page.has_more, page.last_record, len(parsed)) == (0, False, None, 0)


# Paging under the limits


def entry_size(record: ResourceRecord) -> int:
    return len(resource_entry(record))


def test_defaults_are_the_sitemap_limits() -> None:
    assert (MAX_ENTRIES_PER_DOCUMENT, MAX_DOCUMENT_BYTES) == (50_000, 52_428_800)
    page = PageBuilder(b"<a>", b"</a>")
    assert (page.max_entries, page.max_bytes) == (50_000, 52_428_800)


def test_page_builder_accepts_an_exact_fit_and_refuses_one_byte_more() -> None:
    page = PageBuilder(b"<h>", b"</h>", max_entries=10, max_bytes=3 + 4 + 5)

    assert page.add(b"12345")
    assert not page.add(b"x")
    assert page.add(b"")  # nothing left but room for nothing
    assert page.close() == b"<h>12345</h>"

    page = PageBuilder(b"<h>", b"</h>", max_entries=10, max_bytes=3 + 4 + 4)
    assert not page.add(b"12345")
    assert page.entries == 0


def test_page_builder_stops_at_max_entries() -> None:
    page = PageBuilder(b"<h>", b"</h>", max_entries=2, max_bytes=1000)

    assert page.add(b"a") and page.add(b"b")
    assert page.full
    assert not page.add(b"c")
    assert page.close() == b"<h>ab</h>"


def test_byte_limit_closes_the_page_early_and_paging_resumes_after_the_last_record(
    urlset_schema: etree.XMLSchema,
) -> None:
    records = [resource(key) for key in range(1, 11)]
    document = {
        "at": utc(2013, 1, 3),
        "capability_list_url": CAPABILITY_LIST,
        "index_url": f"{BASE}/resourcelist-index.xml",
    }
    empty = build_resource_list([], **document)  # type: ignore[arg-type]
    # Room for three entries, not four.
    max_bytes = len(empty.content) + 3 * entry_size(records[0]) + 1

    pages: list[DocumentPage[ResourceRecord]] = []
    remaining = records
    while True:
        page = build_resource_list(remaining, **document, max_bytes=max_bytes)  # type: ignore[arg-type]
        pages.append(page)
        if not page.has_more:
            break
        assert page.last_record is not None
        remaining = [record for record in records if record.key > page.last_record.key]

    assert [page.entries for page in pages] == [3, 3, 3, 1]
    assert [page.has_more for page in pages] == [True, True, True, False]
    assert all(len(page.content) <= max_bytes for page in pages)
    locs = []
    for page in pages:
        document = etree.fromstring(page.content)
        urlset_schema.assertValid(document)
        locs += [loc.text for loc in document.iter(f"{S}loc")]
    assert locs == [record.uri for record in records]


def test_entry_limit_closes_the_page() -> None:
    records = [resource(key) for key in range(1, 6)]

    first = build_resource_list(
        iter(records), at=utc(2013, 1, 3), capability_list_url=CAPABILITY_LIST, max_entries=2
    )
    exact = build_resource_list(
        records[:2], at=utc(2013, 1, 3), capability_list_url=CAPABILITY_LIST, max_entries=2
    )

    assert (first.entries, first.has_more, first.last_record) == (2, True, records[1])
    assert (exact.entries, exact.has_more) == (2, False)
    assert first.content == exact.content


def test_change_list_splits_on_bytes_too() -> None:
    records = [change(key) for key in range(1, 5)]
    empty = build_change_list([], since=utc(2013, 1, 3), capability_list_url=CAPABILITY_LIST)
    max_bytes = len(empty.content) + len(change_entry(records[0])) * 2 + 10

    page = build_change_list(
        records, since=utc(2013, 1, 3), capability_list_url=CAPABILITY_LIST, max_bytes=max_bytes
    )

    assert (page.entries, page.has_more, page.last_record) == (2, True, records[1])


def test_an_entry_that_can_never_fit_is_an_error() -> None:
    empty = build_resource_list([], at=utc(2013, 1, 3), capability_list_url=CAPABILITY_LIST)

    with pytest.raises(DocumentTooLarge):
        build_resource_list(
            [resource(1)],
            at=utc(2013, 1, 3),
            capability_list_url=CAPABILITY_LIST,
            max_bytes=len(empty.content) + 10,
        )
    with pytest.raises(DocumentTooLarge):
        build_resource_list(
            [], at=utc(2013, 1, 3), capability_list_url=CAPABILITY_LIST, max_bytes=10
        )


def _hour_changes(hours: range) -> list[ChangeRecord]:
    return [
        change(
            n,
            "updated" if n % 2 else "created",
            datetime=utc(2013, 1, 3, n),
            uri=f"http://example.com/a&b/{n}",
        )
        for n in hours
    ]


@pytest.mark.parametrize("index_url", [None, "http://example.com/changelist.xml"])
def test_an_appended_change_list_is_the_full_list_to_the_byte(index_url) -> None:
    """The open list's next version, grown from its previous one's bytes, is what
    rendering every change gives, a root link gained on the way included."""
    since = utc(2013, 1, 3)
    first = build_change_list(
        _hour_changes(range(3)), since=since, capability_list_url=CAPABILITY_LIST
    )

    appended = append_change_list(
        change_list_entries(first.content), first.entries, _hour_changes(range(3, 6)),
        since=since, last=utc(2013, 1, 3, 2), capability_list_url=CAPABILITY_LIST,
        index_url=index_url,
    )  # fmt: skip

    whole = build_change_list(
        _hour_changes(range(6)), since=since, capability_list_url=CAPABILITY_LIST,
        index_url=index_url,
    )  # fmt: skip
    assert appended == whole


def test_an_appended_change_list_stops_at_the_limits() -> None:
    since = utc(2013, 1, 3)
    first = build_change_list(
        _hour_changes(range(3)), since=since, capability_list_url=CAPABILITY_LIST
    )
    kept = change_list_entries(first.content)
    common = {"since": since, "last": utc(2013, 1, 3, 2), "capability_list_url": CAPABILITY_LIST}

    assert append_change_list(kept, 3, [], max_entries=2, **common) is None
    full = append_change_list(kept, 3, _hour_changes(range(3, 6)), max_entries=4, **common)
    assert full is not None and full.has_more and full.entries == 4
    with pytest.raises(ValueError, match="out of order"):
        append_change_list(kept, 3, _hour_changes(range(1, 2)), **common)
    with pytest.raises(ValueError, match="not a whole urlset"):
        change_list_entries(first.content[:-1])


def test_a_page_joined_from_parts_is_the_page_built_whole() -> None:
    records = [resource(key) for key in range(1, 8)]
    at = utc(2013, 1, 3)
    frame = resource_list_frame(at=at, capability_list_url=CAPABILITY_LIST)
    parts = [
        build_resource_entries(records[:3], max_entries=7, max_bytes=10_000),
        build_resource_entries(records[3:], max_entries=7, max_bytes=10_000),
    ]

    joined = join_parts(frame, parts, max_entries=7, max_bytes=10_000)

    whole = build_resource_list(records, at=at, capability_list_url=CAPABILITY_LIST, max_entries=7)
    assert joined == whole
    assert joined is not None and joined.last_record == records[-1]


@pytest.mark.parametrize(("max_entries", "max_bytes"), [(6, 10_000), (7, 1_456), (3, 10_000)])
def test_parts_that_break_a_limit_together_are_not_joined(max_entries: int, max_bytes: int) -> None:
    """The page is then built whole, where the limits decide where it ends (it is 1,457
    bytes; with 3 entries a page, the second part stops on the limit)."""
    records = [resource(key) for key in range(1, 8)]
    frame = resource_list_frame(at=utc(2013, 1, 3), capability_list_url=CAPABILITY_LIST)
    parts = [
        build_resource_entries(records[:3], max_entries=max_entries, max_bytes=max_bytes),
        build_resource_entries(records[3:], max_entries=max_entries, max_bytes=max_bytes),
    ]

    assert join_parts(frame, parts, max_entries=max_entries, max_bytes=max_bytes) is None


def written_batches(records: list[ResourceRecord], size: int) -> list[ResourceBatch]:
    """Records in batches with their columns, as the database generator gives them."""
    chunks = [records[start : start + size] for start in range(0, len(records), size)]
    return [ResourceBatch(len(chunk), chunk.copy, chunk[-1], columns_of(chunk)) for chunk in chunks]


@pytest.mark.parametrize(
    ("max_entries", "max_bytes"),
    [(50_000, MAX_DOCUMENT_BYTES), (20, MAX_DOCUMENT_BYTES), (7, MAX_DOCUMENT_BYTES), (50, 4_000)],
)
def test_a_page_from_written_batches_is_the_page_from_records(
    max_entries: int, max_bytes: int
) -> None:
    """Batches the writer wrote whole, or a limit inside one, end the page where records do."""
    records = [
        resource(key, links=(Link("describedby", f"{BASE}/{key}.xml", "text/xml"),))
        for key in range(1, 31)
    ]
    records[12] = records[12]._replace(uri=f"{BASE}/a&b")  # its batch is written one by one
    document = {
        "at": utc(2013, 1, 3),
        "capability_list_url": CAPABILITY_LIST,
        "max_entries": max_entries,
        "max_bytes": max_bytes,
    }

    from_batches = build_resource_list(written_batches(records, 5), **document)  # type: ignore[arg-type]

    assert from_batches == build_resource_list(records, **document)  # type: ignore[arg-type]


def test_a_streamed_page_is_the_same_bytes_handed_over_in_chunks(monkeypatch) -> None:
    """A page streamed to `out` is never held whole, and is the page built in memory."""
    monkeypatch.setattr("sitemaps.protocol.builders.STREAM_CHUNK_BYTES", 2048)
    records = [resource(key) for key in range(1, 201)]
    document = {"at": utc(2013, 1, 3), "capability_list_url": CAPABILITY_LIST, "max_entries": 150}
    whole = build_resource_list(records, **document)  # type: ignore[arg-type]
    chunks: list[bytes] = []

    streamed = build_resource_list(records, **document, out=chunks.append)  # type: ignore[arg-type]

    assert streamed.content == b"" and b"".join(chunks) == whole.content
    assert streamed.size == whole.size == len(whole.content)
    assert (streamed.entries, streamed.has_more, streamed.last_record) == (150, True, records[149])
    assert len(chunks) > 5 and max(map(len, chunks)) < 2048 + 1024  # a chunk, an entry, the header
