"""The ResourceSync reader: the spec's examples, datetimes, and hostile input."""

from __future__ import annotations

import datetime as dt
import io
import os
from pathlib import Path

import pytest

from sitemaps.protocol.reader import (
    MAX_BYTES_WITHOUT_END,
    MAX_ENTRY_ELEMENTS,
    Document,
    ResourceSyncParseError,
    parse_datetime,
    parse_document,
    parse_hash,
)
from sitemaps.protocol.writer import Entry as WrittenEntry
from sitemaps.protocol.writer import render_document

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "spec-examples-1.1"

NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)

# Example number -> (root is a sitemapindex, capability, number of entries)
EXPECTED = {
    1: (False, "resourcelist", 2),
    2: (False, "resourcelist", 2),
    3: (False, "changelist", 3),
    4: (False, "resourcedump", 1),
    5: (False, "resourcedump-manifest", 2),
    6: (False, "capabilitylist", 3),
    7: (False, "description", 1),
    8: (True, "resourcelist", 2),
    12: (False, "description", 3),
    13: (False, "capabilitylist", 4),
    14: (False, "resourcelist", 2),
    15: (True, "resourcelist", 3),
    16: (False, "resourcelist", 2),
    17: (False, "resourcedump", 3),
    18: (False, "resourcedump-manifest", 2),
    19: (False, "changelist", 4),
    20: (True, "changelist", 3),
    21: (False, "changelist", 4),
    22: (False, "changedump", 3),
    23: (False, "changedump-manifest", 4),
    24: (False, "changelist", 1),
    25: (False, "changelist", 1),
    26: (False, "changelist", 1),
    27: (False, "changelist", 2),
    28: (False, "changelist", 2),
    29: (False, "changelist", 1),
    30: (False, "changelist", 1),
    31: (False, "changelist", 1),
    32: (False, "changelist", 1),
    33: (False, "changelist", 1),
}


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> dt.datetime:
    return dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.UTC)


def example(number: int) -> Document:
    return parse_document((EXAMPLES / f"resourcesync_ex_{number}.xml").read_bytes())


def test_every_spec_example_is_covered() -> None:
    numbers = {int(p.stem.rsplit("_", 1)[1]) for p in EXAMPLES.glob("resourcesync_ex_*.xml")}
    assert numbers == set(EXPECTED)


@pytest.mark.parametrize("number", sorted(EXPECTED))
def test_spec_example_parses(number: int) -> None:
    document = example(number)

    assert (document.is_index, document.capability, len(document.entries)) == EXPECTED[number]
    assert all(entry.loc.startswith("http://") for entry in document.entries)


def test_resource_list_with_hashes_lengths_and_types() -> None:
    document = example(14)

    assert document.at == utc(2013, 1, 3, 9)
    assert document.completed == utc(2013, 1, 3, 9, 1)
    up = document.link("up")
    assert up is not None
    assert up.href == "http://example.com/dataset1/capabilitylist.xml"
    second = document.entries[1]
    assert second.loc == "http://example.com/res2"
    assert second.lastmod == utc(2013, 1, 2, 14)
    assert second.length == 14599
    assert second.type == "application/pdf"
    assert second.hash == {
        "md5": "1e0d5cb8ef6ba40c99b14c0237be735e",
        "sha-256": "854f61290e2e197a11bc91063afce22e43f8ccc655237050ace766adc68dc784",
    }


def test_resource_list_index_parts() -> None:
    document = example(15)

    assert document.is_index
    assert (document.at, document.completed) == (utc(2013, 1, 3, 9), utc(2013, 1, 3, 9, 10))
    assert [(e.loc, e.at) for e in document.entries] == [
        ("http://example.com/resourcelist1.xml", utc(2013, 1, 3, 9)),
        ("http://example.com/resourcelist2.xml", utc(2013, 1, 3, 9, 3)),
        ("http://example.com/resourcelist3.xml", utc(2013, 1, 3, 9, 7)),
    ]


def test_change_list_entries() -> None:
    document = example(19)

    assert (document.from_, document.until) == (utc(2013, 1, 3), None)
    assert [(e.loc, e.change, e.datetime) for e in document.entries] == [
        ("http://example.com/res1.html", "created", utc(2013, 1, 3, 11)),
        ("http://example.com/res2.pdf", "updated", utc(2013, 1, 3, 13)),
        ("http://example.com/res3.tiff", "deleted", utc(2013, 1, 3, 18)),
        ("http://example.com/res2.pdf", "updated", None),  # the spec allows no datetime
    ]
    assert document.entries[0].lastmod == utc(2000, 1, 1, 1, 1)  # lastmod may predate `from`


def test_change_list_index_parts_open_and_closed() -> None:
    document = example(20)

    assert [(e.from_, e.until) for e in document.entries] == [
        (utc(2013, 1, 1), utc(2013, 1, 2)),
        (utc(2013, 1, 2), utc(2013, 1, 3)),
        (utc(2013, 1, 3), None),
    ]


def test_dump_entries_and_manifest_paths() -> None:
    dump = example(17)
    manifest = example(23)

    package = dump.entries[0]
    assert (package.type, package.length) == ("application/zip", 4765)
    contents = package.link("contents")
    assert contents is not None
    assert contents.href == "http://example.com/resourcedump_manifest-part1.xml"
    assert [e.path for e in manifest.entries] == [
        "/changes/res7.html",
        "/changes/res9.pdf",
        None,
        "/changes/res7-v2.html",
    ]


def test_capability_list_entries_and_root_links() -> None:
    document = example(13)

    assert [e.capability for e in document.entries] == [
        "resourcelist",
        "resourcedump",
        "changelist",
        "changedump",
    ]
    assert [link.rel for link in document.links] == ["describedby", "up"]


def test_link_attributes() -> None:
    mirrors = example(24).entries[0].links_with("duplicate")
    patch = example(27).entries[1]
    metadata = example(28).entries[1]

    assert [(link.pri, link.href) for link in mirrors] == [
        (1, "http://mirror1.example.com/res1"),
        (2, "http://mirror2.example.com/res1"),
        (3, "gsiftp://gridftp.example.com/res1"),
    ]
    assert mirrors[2].modified == utc(2013, 1, 3, 18, 0, 23)
    assert patch.length == 9788456778
    link = patch.link("http://www.openarchives.org/rs/terms/patch")
    assert link is not None
    assert (link.type, link.length) == ("application/x-tiff-diff", 4533)
    describes = metadata.link("describes")
    assert describes is not None
    assert describes.hash == {"md5": "1584abdf8ebdc9802ac0c6a7402c03b6"}


def test_reads_what_the_project_writer_writes() -> None:
    data = render_document(
        "urlset",
        {"capability": "changelist", "from": "2024-01-01T00:00:00Z"},
        [{"rel": "up", "href": "http://example.org/capabilitylist.xml"}],
        [
            WrittenEntry(
                "http://example.org/a?x=1&y=<2>",
                md={
                    "change": "updated",
                    "datetime": "2024-01-02T03:04:05.5Z",
                    "hash": "md5:00ff sha-256:aa",
                    "length": "3",
                },
            )
        ],
    )

    entry = parse_document(data).entries[0]

    assert entry.loc == "http://example.org/a?x=1&y=<2>"
    assert entry.datetime == dt.datetime(2024, 1, 2, 3, 4, 5, 500000, tzinfo=dt.UTC)
    assert (entry.change, entry.length, entry.hash) == (
        "updated",
        3,
        {"md5": "00ff", "sha-256": "aa"},
    )


def test_reads_a_file_object() -> None:
    with (EXAMPLES / "resourcesync_ex_1.xml").open("rb") as handle:
        assert len(parse_document(handle).entries) == 2


# --- Hostile and invalid documents ------------------------------------------------


XXE = f"""<?xml version="1.0"?>
<!DOCTYPE urlset [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<urlset {NS}><rs:md capability="resourcelist" at="2024-01-01T00:00:00Z"/>
<url><loc>http://example.org/&xxe;</loc></url></urlset>"""

BILLION_LAUGHS = f"""<?xml version="1.0"?>
<!DOCTYPE urlset [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<urlset {NS}><rs:md capability="resourcelist" at="2024-01-01T00:00:00Z"/>
<url><loc>http://example.org/&lol3;</loc></url></urlset>"""


@pytest.mark.parametrize(
    "data",
    [
        XXE.encode(),
        BILLION_LAUGHS.encode(),
        XXE.replace('"1.0"?>', '"1.0" encoding="UTF-16"?>', 1).encode("utf-16"),
    ],
    ids=["xxe", "billion-laughs", "utf-16-doctype"],
)
def test_documents_with_dtds_are_refused(data: bytes) -> None:
    with pytest.raises(ResourceSyncParseError, match="DOCTYPE"):
        parse_document(data)


def test_oversized_document_is_refused_before_parsing() -> None:
    body = b"<url><loc>http://example.org/x</loc></url>" * 100
    data = f"<urlset {NS}><rs:md capability='resourcelist'/>".encode() + body  # never closed

    with pytest.raises(ResourceSyncParseError, match="larger than the limit of 1000 bytes"):
        parse_document(data, max_bytes=1000)
    with pytest.raises(ResourceSyncParseError, match="larger than the limit"):
        parse_document(io.BytesIO(data), max_bytes=1000)


def document(entry: str, md: str = 'capability="resourcelist" at="2024-01-01T00:00:00Z"') -> bytes:
    return f"<urlset {NS}><rs:md {md}/>{entry}</urlset>".encode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (document("<url><loc>x</loc><lastmod>2024-01-01T10:00:00</lastmod></url>"), "time zone"),
        (document("", md='capability="resourcelist" at="2024-01-01T10:00"'), "time zone"),
        (document("<url><loc>x</loc><rs:md datetime='2024-13-01T00:00Z'/></url>"), "invalid"),
        (document("<url><loc>x</loc><rs:md change='modified'/></url>"), "change type"),
        (document("<url><loc>x</loc><rs:md length='-1'/></url>"), "negative"),
        (document("<url><loc>x</loc><rs:md hash='md5:aa md5:bb'/></url>"), "twice"),
        (document("<url><loc>x</loc><rs:md hash='d41d8cd9'/></url>"), "algo:digest"),
        (document("<url><loc>x</loc><rs:ln rel='up'/></url>"), "rel and href"),
        (document("<url><loc>x</loc><rs:ln rel='duplicate' href='y' pri='0'/></url>"), "pri"),
        (document("<url><lastmod>2024-01-01</lastmod></url>"), "one non-empty <loc>"),
        (document("<url><loc> </loc></url>"), "one non-empty <loc>"),
        (document("<url><loc>x</loc></url><rs:md capability='resourcelist'/>"), "precede"),
        (document("", md='at="2024-01-01T00:00:00Z"'), "capability"),
        (b"<urlset><rs:md capability='resourcelist'/></urlset>", "root element"),
        (f"<urlset {NS}><url>".encode(), "well-formed"),
        (b"", "empty"),
    ],
)
def test_invalid_documents_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(ResourceSyncParseError, match=message):
        parse_document(data)


LINK = "<rs:ln rel='alternate' href='y'/>"


@pytest.mark.parametrize(
    "entries",
    [
        "<url><loc>x</loc>" + "<x/>" * MAX_ENTRY_ELEMENTS + "</url>",
        "<url><loc>x</loc>" + "<x/>text" * MAX_ENTRY_ELEMENTS + "</url>",
        "<url><loc>x</loc><x>" + "<y/>" * MAX_ENTRY_ELEMENTS + "</x></url>",
        "<url><loc>x</loc>" + ("<x>" * 200 + "</x>" * 200) * 5 + "</url>",
        "<url><loc>x</loc>" + LINK * MAX_ENTRY_ELEMENTS + "</url>",
        "<other>" + "<x/>" * (MAX_ENTRY_ELEMENTS + 1) + "</other>",
    ],
    ids=["children", "children-and-text", "grandchildren", "deep", "links", "not-an-entry"],
)
def test_an_element_under_the_root_holding_more_than_any_entry_does_is_refused(
    entries: str,
) -> None:
    with pytest.raises(ResourceSyncParseError, match=f"more than {MAX_ENTRY_ELEMENTS} elements"):
        parse_document(document(entries))


def test_an_entry_at_the_element_limit_is_read() -> None:
    entry = "<url><loc>x</loc>" + LINK * (MAX_ENTRY_ELEMENTS - 1) + "</url>"

    entries = parse_document(document(entry * 2)).entries

    assert [len(parsed.links) for parsed in entries] == [MAX_ENTRY_ELEMENTS - 1] * 2


def test_a_root_with_more_links_than_an_entry_may_hold_is_refused() -> None:
    data = document(LINK * (MAX_ENTRY_ELEMENTS + 1))

    with pytest.raises(ResourceSyncParseError, match=f"more than {MAX_ENTRY_ELEMENTS} root"):
        parse_document(data)


@pytest.mark.parametrize(
    "entry",
    [
        "<url><loc>x</loc><x"
        + "".join(f' a{n}=""' for n in range(MAX_BYTES_WITHOUT_END // 5))
        + "/>",
        "<url><loc>x" + "y" * 2 * MAX_BYTES_WITHOUT_END + "</loc>",
    ],
    ids=["start-tag", "text"],
)
def test_markup_running_on_without_an_element_ending_is_refused(entry: str) -> None:
    with pytest.raises(ResourceSyncParseError, match=f"{MAX_BYTES_WITHOUT_END} bytes"):
        parse_document(document(entry + "</url>"))


def _attributes(count: int) -> str:
    return "".join(f' a{n}=""' for n in range(count))


@pytest.mark.parametrize(
    "entry",
    [
        # each child's tag ends well within the bound, the entry does not
        "<url><loc>x</loc>" + f"<x{_attributes(12_000)}/>" * 20 + "</url>",
        # open ancestors full of attributes, each with a child that ends at once
        "<url><loc>x</loc>" + f"<x{_attributes(40_000)}><y/>" * 6 + "</x>" * 6 + "</url>",
        "<url><loc>x</loc></url>" + "text" * (MAX_BYTES_WITHOUT_END // 3),
    ],
    ids=["children-full-of-attributes", "nested-ancestors", "text-between-entries"],
)
def test_an_element_under_the_root_spanning_more_than_any_real_one_is_refused(
    entry: str,
) -> None:
    """libxml2 holds ~30 bytes per byte of attributes: 1.5-1.6 GB for a 58 MB entry."""
    with pytest.raises(ResourceSyncParseError, match=f"{MAX_BYTES_WITHOUT_END} bytes"):
        parse_document(document(entry))


def test_entries_spanning_more_than_the_bound_together_are_read() -> None:
    entry = "<url><loc>x</loc>" + LINK * 500 + "</url>"

    entries = parse_document(document(entry * 100)).entries

    assert len(entries) == 100


def test_unknown_elements_and_attributes_are_ignored() -> None:
    data = document(
        "<url><loc>x</loc><changefreq>daily</changefreq>"
        "<rs:md change='updated' x:extra='1' xmlns:x='urn:x'/></url><other/>"
    )

    assert parse_document(data).entries[0].change == "updated"


# --- Values -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2013-01-03T09:00:00Z", utc(2013, 1, 3, 9)),
        ("2013-01-03T09:00:00.123456789Z", dt.datetime(2013, 1, 3, 9, 0, 0, 123456, tzinfo=dt.UTC)),
        ("2013-01-03T10:30:00+01:30", utc(2013, 1, 3, 9)),
        ("2013-01-03T04:00-05:00", utc(2013, 1, 3, 9)),
        ("2013-01-03", utc(2013, 1, 3)),
        ("2013-01", utc(2013, 1, 1)),
        ("2013", utc(2013, 1, 1)),
    ],
)
def test_w3c_datetimes_become_aware_utc(text: str, expected: dt.datetime) -> None:
    parsed = parse_datetime(text)

    assert parsed == expected
    assert parsed.utcoffset() == dt.timedelta(0)


@pytest.mark.parametrize(
    "text", ["2013-01-03T09:00:00", "2013-01-03T09:00", "2013-01-03 09:00:00Z", "yesterday"]
)
def test_datetimes_without_zone_or_malformed_are_refused(text: str) -> None:
    with pytest.raises(ResourceSyncParseError):
        parse_datetime(text)


def test_hash_values_are_split_by_algorithm() -> None:
    assert parse_hash("MD5:1584ABDF  sha-256:854f") == {"md5": "1584abdf", "sha-256": "854f"}


def test_documents_of_ever_new_names_do_not_grow_memory() -> None:
    """libxml2 keeps every name it read until its thread ends: a `harvest --follow`
    reading a source that sends ever new names grew without end (18 MiB here)."""

    def document(seed: int) -> bytes:
        names = ("".join(f"<n{seed}x{e}x{k}/>" for k in range(100)) for e in range(2000))
        urls = "".join(
            f"<url><loc>http://example.org/{e}</loc>{children}</url>"
            for e, children in enumerate(names)
        )
        return (f'<urlset {NS}><rs:md capability="resourcelist"/>{urls}</urlset>').encode()

    def resident_mib() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20

    parse_document(document(0))
    before = resident_mib()
    for seed in range(1, 4):
        parse_document(document(seed))

    assert resident_mib() - before < 8
