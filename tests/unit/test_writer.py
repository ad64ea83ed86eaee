"""The XML writer: byte-equal to lxml's serialization, and no value can escape its place."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import pytest
from lxml import etree

from sitemaps.protocol.constants import RS_NS, SITEMAP_NS, w3c_datetime
from sitemaps.protocol.records import Link, ResourceColumns, ResourceRecord
from sitemaps.protocol.writer import (
    LN_ATTRIBUTES,
    MD_ATTRIBUTES,
    DocumentWriter,
    Entry,
    RootElement,
    escape_attribute,
    escape_text,
    render_document,
    resource_url,
    resource_urls,
    schema_type,
)

S = f"{{{SITEMAP_NS}}}"
RS = f"{{{RS_NS}}}"

# Characters that XML 1.0 forbids; lxml refuses them too.
FORBIDDEN = ["\x00", "\x01", "\x08", "\x0b", "\x0c", "\x0e", "\x1f", "\ufffe", "\uffff", "\ud800"]

# Pieces hostile values are made of: markup, entities, CDATA ends, whitespace that
# attribute normalisation would eat, non-ASCII, and characters allowed but unusual.
HOSTILE_PIECES = [
    '"',
    "'",
    "&",
    "&amp;",
    "&#9;",
    "<",
    ">",
    "]]>",
    "<![CDATA[",
    '"><evil/>',
    "</loc><evil/>",
    "\t",
    "\n",
    "\r",
    "\r\n",
    " ",
    "é",
    "ß",
    "日本",
    "😀",
    "\x7f",
    "\x85",
    "\u2028",
    "\ufeff",
    "http://example.com/a?b=1&c=2",
    "plain",
    "0",
]


def lxml_document(
    root: RootElement,
    md: Mapping[str, str],
    links: Sequence[Mapping[str, str]] = (),
    entries: Sequence[Entry] = (),
) -> bytes:
    """The same document built with lxml's API, as the reference serialization."""

    def add_empty(
        parent: etree._Element, tag: str, attributes: Mapping[str, str], order: Sequence[str]
    ) -> None:
        present = [(name, written(attributes, name)) for name in order if attributes.get(name)]
        present = [(name, value) for name, value in present if value]
        if present:
            element = etree.SubElement(parent, tag)
            for name, value in present:
                element.set(name, value)

    document = etree.Element(f"{S}{root}", nsmap={None: SITEMAP_NS, "rs": RS_NS})
    add_empty(document, f"{RS}md", md, MD_ATTRIBUTES)
    for link in links:
        add_empty(document, f"{RS}ln", link, LN_ATTRIBUTES)
    entry_tag = "url" if root == "urlset" else "sitemap"
    for entry in entries:
        element = etree.SubElement(document, f"{S}{entry_tag}")
        etree.SubElement(element, f"{S}loc").text = entry.loc
        if entry.lastmod:
            etree.SubElement(element, f"{S}lastmod").text = entry.lastmod
        add_empty(element, f"{RS}md", entry.md, MD_ATTRIBUTES)
        for link in entry.links:
            add_empty(element, f"{RS}ln", link, LN_ATTRIBUTES)
    return etree.tostring(document.getroottree(), xml_declaration=True, encoding="UTF-8")


def written(attributes: Mapping[str, str], name: str) -> str:
    """An attribute as the writer means to write it: a `type` as the schema takes it."""
    return schema_type(attributes[name]) if name == "type" else attributes[name]


def hostile_value(rng: random.Random) -> str:
    return "".join(rng.choice(HOSTILE_PIECES) for _ in range(rng.randint(1, 6)))


def random_attributes(
    rng: random.Random, order: Sequence[str], required: Sequence[str] = ()
) -> dict[str, str]:
    names = list(required) + rng.sample(
        [name for name in order if name not in required], rng.randint(0, 4)
    )
    rng.shuffle(names)  # insertion order must not matter
    return {name: hostile_value(rng) for name in names}


def random_document(
    rng: random.Random,
) -> tuple[RootElement, dict[str, str], list[dict[str, str]], list[Entry]]:
    root: RootElement = rng.choice(["urlset", "sitemapindex"])
    md = random_attributes(rng, MD_ATTRIBUTES, required=["capability"])
    links = [
        random_attributes(rng, LN_ATTRIBUTES, required=["rel", "href"])
        for _ in range(rng.randint(0, 2))
    ]
    entries = [
        Entry(
            loc=hostile_value(rng),
            lastmod=rng.choice([None, "2013-01-02T13:00:00Z", hostile_value(rng)]),
            md=random_attributes(rng, MD_ATTRIBUTES),
            links=[
                random_attributes(rng, LN_ATTRIBUTES, required=["rel", "href"])
                for _ in range(rng.randint(0, 2))
            ],
        )
        for _ in range(rng.randint(0, 4))
    ]
    return root, md, links, entries


def test_plain_document_matches_lxml() -> None:
    md = {"capability": "resourcelist", "at": "2013-01-03T09:00:00Z"}
    links = [{"rel": "up", "href": "http://example.com/dataset1/capabilitylist.xml"}]
    entries = [
        Entry(
            "http://example.com/res1",
            "2013-01-02T13:00:00Z",
            {"hash": "md5:1584abdf8ebdc9802ac0c6a7402c03b6", "length": "8876", "type": "text/html"},
        ),
        Entry(
            "http://example.com/res2",
            links=[{"rel": "duplicate", "href": "http://mirror.example.com/res2", "pri": "1"}],
        ),
    ]

    assert render_document("urlset", md, links, entries) == lxml_document(
        "urlset", md, links, entries
    )


@pytest.mark.parametrize("seed", range(20))
def test_hostile_documents_match_lxml(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        root, md, links, entries = random_document(rng)

        assert render_document(root, md, links, entries) == lxml_document(root, md, links, entries)


@pytest.mark.parametrize("value", HOSTILE_PIECES)
def test_each_hostile_piece_matches_lxml_in_every_position(value: str) -> None:
    md = {"capability": value, "at": value}
    links = [{"rel": value, "href": value, "type": value}]
    entries = [Entry(value, value, {"hash": value, "type": value}, [{"rel": value, "href": value}])]

    for root in ("urlset", "sitemapindex"):
        assert render_document(root, md, links, entries) == lxml_document(root, md, links, entries)


@pytest.mark.parametrize("seed", range(5))
def test_hostile_values_round_trip_through_a_parser(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        root, md, links, entries = random_document(rng)
        document = etree.fromstring(render_document(root, md, links, entries))

        parsed_md = document.find(f"{RS}md")
        assert parsed_md is not None
        expected = {name: written(md, name) for name in md}
        assert dict(parsed_md.attrib) == {name: value for name, value in expected.items() if value}
        # CR in text is kept as &#13;, so even it survives the parser's newline handling.
        locs = [loc.text for loc in document.iter(f"{S}loc")]
        assert locs == [entry.loc for entry in entries]


# The Resource List fast path: `resource_entry()` must give `entry()`'s bytes, so lxml's.

RESOURCE_MD = ("hash", "length", "type", "path")


def resource_entry_document(
    loc: str, lastmod: str, md: dict[str, str], links: list[tuple[str, str, str]]
) -> tuple[bytes, bytes]:
    """The document holding one entry written by the fast path, and lxml's for the same entry."""
    root_md = {"capability": "resourcelist"}
    writer = DocumentWriter("urlset")
    written = (
        writer.start(root_md)
        + writer.resource_entry(loc, lastmod, **md, links=links)
        + writer.end()
    )
    link_attributes = [{"rel": rel, "href": href, "type": kind} for rel, href, kind in links]
    expected = lxml_document("urlset", root_md, entries=[Entry(loc, lastmod, md, link_attributes)])
    return written, expected


@pytest.mark.parametrize("seed", range(20))
def test_hostile_resource_entries_match_lxml(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        loc = rng.choice(["http://example.com/res1", hostile_value(rng)])
        lastmod = rng.choice(["2013-01-02T13:00:00Z", "", hostile_value(rng)])
        md = {name: rng.choice(["", "md5:1584abdf", hostile_value(rng)]) for name in RESOURCE_MD}
        links = [
            (
                rng.choice(["describedby", hostile_value(rng)]),
                rng.choice(["http://example.com/res1.xml", hostile_value(rng)]),
                rng.choice(["", "application/xml", hostile_value(rng)]),
            )
            for _ in range(rng.randint(0, 3))
        ]

        written, expected = resource_entry_document(loc, lastmod, md, links)

        assert written == expected


@pytest.mark.parametrize("value", HOSTILE_PIECES)
def test_each_hostile_piece_matches_lxml_in_every_resource_entry_position(value: str) -> None:
    md = dict.fromkeys(RESOURCE_MD, value)

    written, expected = resource_entry_document(value, value, md, [(value, value, value)])

    assert written == expected


def test_plain_resource_entry_is_the_same_as_entry() -> None:
    writer = DocumentWriter("urlset")
    md = {"hash": "md5:1584abdf8ebdc9802ac0c6a7402c03b6", "length": "8876", "type": "text/html"}
    link = ("describedby", "http://example.com/res1.xml", "application/xml")

    fast = writer.resource_entry(
        "http://example.com/res1", "2013-01-02T13:00:00Z", **md, links=[link]
    )

    assert fast == writer.entry(
        "http://example.com/res1",
        "2013-01-02T13:00:00Z",
        md,
        [{"rel": link[0], "href": link[1], "type": link[2]}],
    )
    assert fast == (
        b"<url><loc>http://example.com/res1</loc><lastmod>2013-01-02T13:00:00Z</lastmod>"
        b'<rs:md hash="md5:1584abdf8ebdc9802ac0c6a7402c03b6" length="8876" type="text/html"/>'
        b'<rs:ln rel="describedby" href="http://example.com/res1.xml" type="application/xml"/>'
        b"</url>"
    )


# `resource_url()`, a record's Resource List entry in one call, gives `resource_entry()`'s bytes.


def hostile_record(rng: random.Random) -> ResourceRecord:
    """A record whose every text field is plain, empty or hostile, with 0 to 3 links."""

    def text(plain: str) -> str:
        return rng.choice([plain, plain, "", hostile_value(rng)])

    links = tuple(
        Link(text("describedby"), text("http://example.com/r.xml"), text("application/xml"))
        for _ in range(rng.randint(0, 3))
    )
    return ResourceRecord(
        key=1,
        uri=rng.choice(["http://example.com/r?a=1", hostile_value(rng)]),
        lastmod=datetime(2013, 1, 2, 13, 0, rng.choice([0, 5]), rng.choice([0, 120]), tzinfo=UTC),
        length=rng.choice([0, 8876]),
        md5=text("1584abdf8ebdc9802ac0c6a7402c03b6"),
        mime=text("text/html"),
        sha256=rng.choice(["", "", "a" * 64]),
        links=links,
    )


def written_by_resource_entry(record: ResourceRecord) -> bytes:
    """The entry as the general `resource_entry()` writes it (escaping, or raising)."""
    hashes = []
    if record.md5:
        hashes.append(f"md5:{record.md5}")
    if record.sha256:
        hashes.append(f"sha-256:{record.sha256}")
    return DocumentWriter("urlset").resource_entry(
        record.uri,
        w3c_datetime(record.lastmod),
        hash=" ".join(hashes),
        length=str(record.length),
        type=record.mime,
        links=record.links,
    )


@pytest.mark.parametrize("seed", range(10))
def test_resource_url_writes_what_resource_entry_writes(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        record = hostile_record(rng)
        try:
            expected = written_by_resource_entry(record)
        except ValueError as refused:
            with pytest.raises(ValueError, match=str(refused)[:20]):
                resource_url(record)
            continue

        assert resource_url(record) == expected


def test_resource_url_of_the_usual_record() -> None:
    record = ResourceRecord(
        key=1,
        uri="http://example.com/res1",
        lastmod=datetime(2013, 1, 2, 13, 0, tzinfo=UTC),
        length=8876,
        md5="1584abdf8ebdc9802ac0c6a7402c03b6",
        mime="text/html",
        links=(Link("describedby", "http://example.com/res1.xml", "application/xml"),),
    )

    assert resource_url(record) == (
        b"<url><loc>http://example.com/res1</loc><lastmod>2013-01-02T13:00:00Z</lastmod>"
        b'<rs:md hash="md5:1584abdf8ebdc9802ac0c6a7402c03b6" length="8876" type="text/html"/>'
        b'<rs:ln rel="describedby" href="http://example.com/res1.xml" type="application/xml"/>'
        b"</url>"
    )


# `resource_urls()`, a batch of usual records in one pass, gives `resource_url()`'s bytes or None.


def columns_of(records: Sequence[ResourceRecord]) -> ResourceColumns:
    """The records' values as a generator's columns (links as None when none has one)."""
    linked = any(record.links for record in records)

    def link_column(field: int) -> list[str] | None:
        return [r.links[0][field] if r.links else "" for r in records] if linked else None

    return ResourceColumns(
        uris=[r.uri for r in records],
        lastmods=[w3c_datetime(r.lastmod) for r in records],
        md5s=[r.md5 for r in records],
        lengths=[r.length for r in records],
        mimes=[r.mime for r in records],
        rels=link_column(0),
        hrefs=link_column(1),
        link_mimes=link_column(2),
    )


def usual_record(key: int, *, link: bool = True, **fields: object) -> ResourceRecord:
    values: dict[str, object] = {
        "key": key,
        "uri": f"http://example.com/r/{key}?a=1",
        "lastmod": datetime(2013, 1, 2, 13, 0, key % 60, key * 1000 % 1_000_000, tzinfo=UTC),
        "length": 1000 + key,
        "md5": "1584abdf8ebdc9802ac0c6a7402c03b6",
        "mime": "text/html",
        "links": (Link("describedby", f"http://example.com/r/{key}.xml", "application/xml"),)
        if link
        else (),
    }
    values.update(fields)
    return ResourceRecord(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize("link", [True, False])
def test_resource_urls_of_usual_records_are_their_resource_url_entries(link: bool) -> None:
    records = [usual_record(key, link=link) for key in range(1, 40)]

    assert resource_urls(columns_of(records)) == b"".join(map(resource_url, records))


@pytest.mark.parametrize("value", HOSTILE_PIECES)
@pytest.mark.parametrize("field", ["uri", "md5", "rel", "href"])
def test_resource_urls_escape_what_resource_url_escapes(field: str, value: str) -> None:
    """A value to escape in one entry of a batch: that entry is escaped, the rest are not."""
    records = [usual_record(key) for key in range(1, 200)]
    records[130] = with_value(records[130], field, value)

    assert resource_urls(columns_of(records)) == b"".join(map(resource_url, records))


@pytest.mark.parametrize("value", [*HOSTILE_PIECES, "text/plain; charset=utf-8", "a/b.c"])
@pytest.mark.parametrize("field", ["mime", "link_mime"])
def test_resource_urls_write_media_types_as_resource_url_does(field: str, value: str) -> None:
    """As the schema takes them (`schema_type`); a type left out leaves the batch to
    `resource_url`, as any empty value does."""
    records = [usual_record(key) for key in range(1, 200)]
    records[130] = with_value(records[130], field, value)

    written = resource_urls(columns_of(records))
    expected = b"".join(map(resource_url, records))
    assert written == expected if schema_type(value) else written is None
    urlset = f'<urlset xmlns="{SITEMAP_NS}" xmlns:rs="{RS_NS}">'.encode()
    entry = etree.fromstring(urlset + expected + b"</urlset>")[130]
    where = f"{RS}md" if field == "mime" else f"{RS}ln"
    assert entry.find(where).get("type") == (schema_type(value) or None)


@pytest.mark.parametrize("field", ["uri", "md5", "mime", "rel", "href", "link_mime"])
def test_resource_urls_leave_a_batch_with_an_empty_value_to_resource_url(field: str) -> None:
    records = [usual_record(key) for key in range(1, 6)]
    records[2] = with_value(records[2], field, "")

    assert resource_urls(columns_of(records)) is None


@pytest.mark.parametrize("character", FORBIDDEN)
def test_resource_urls_refuse_what_xml_forbids(character: str) -> None:
    records = [usual_record(key) for key in range(1, 6)]
    records[2] = with_value(records[2], "href", f"http://example.com/{character}")

    with pytest.raises(ValueError):  # as resource_url() raises (a surrogate cannot be encoded)
        resource_urls(columns_of(records))


def with_value(record: ResourceRecord, field: str, value: str) -> ResourceRecord:
    """The record with one of its own fields, or of its link's, set to `value`."""
    if field in ("rel", "href", "link_mime"):
        link = record.links[0]._replace(**{field.removeprefix("link_"): value})
        return record._replace(links=(link,))
    return record._replace(**{field: value})


def test_resource_urls_leave_a_batch_mixing_linked_and_unlinked_records() -> None:
    records = [usual_record(1), usual_record(2, link=False)]

    assert resource_urls(columns_of(records)) is None
    assert resource_urls(columns_of(records)._replace(rels=None)) is None


@pytest.mark.parametrize(
    "call",
    [
        lambda w: w.resource_entry("", "2013-01-02T13:00:00Z"),
        lambda w: w.resource_entry("http://a.b/", "2013-01-02T13:00:00Z", links=[("", "h", "")]),
        lambda w: w.resource_entry("http://a.b/", "2013-01-02T13:00:00Z", links=[("up", "", "")]),
    ],
    ids=["empty loc", "link without rel", "link without href"],
)
def test_malformed_resource_entries_are_refused(call) -> None:
    with pytest.raises(ValueError):
        call(DocumentWriter("urlset"))


INJECTIONS = ['"><evil/>', "</loc><evil/><loc>", "'/><evil a='", "<!--", "<?pi?>", "]]><evil/>"]


@pytest.mark.parametrize("attack", INJECTIONS)
def test_injected_markup_cannot_create_elements(attack: str) -> None:
    content = render_document(
        "urlset",
        {"capability": "resourcelist" + attack, "at": attack},
        [{"rel": "up" + attack, "href": attack}],
        [
            Entry(
                "http://example.com/" + attack,
                attack,
                {"path": "/r" + attack, "hash": attack},
                [{"rel": attack, "href": "http://example.com/" + attack, "path": attack}],
            )
        ],
    )

    document = etree.fromstring(content)
    tags = [element.tag for element in document.iter()]
    assert tags == [
        f"{S}urlset",
        f"{RS}md",
        f"{RS}ln",
        f"{S}url",
        f"{S}loc",
        f"{S}lastmod",
        f"{RS}md",
        f"{RS}ln",
    ]
    assert document.find(f"{S}url/{S}loc").text == "http://example.com/" + attack
    assert document.find(f"{S}url/{RS}md").get("path") == "/r" + attack
    assert document.find(f"{S}url/{RS}ln").get("rel") == attack
    assert not list(document.iter(etree.Comment, etree.ProcessingInstruction))


@pytest.mark.parametrize("character", FORBIDDEN)
@pytest.mark.parametrize(
    "place",
    [
        "loc",
        "lastmod",
        "md",
        "link",
        "root md",
        "root link",
        "escape_text",
        "resource entry loc",
        "resource entry md",
        "resource entry link",
    ],
)
def test_forbidden_characters_are_rejected(character: str, place: str) -> None:
    bad = f"http://example.com/{character}x"
    writer = DocumentWriter("urlset")

    with pytest.raises(ValueError):
        if place == "resource entry loc":
            writer.resource_entry(bad, "2013-01-02T13:00:00Z", length="1")
        elif place == "resource entry md":
            writer.resource_entry("http://example.com/", "2013-01-02T13:00:00Z", path=bad)
        elif place == "resource entry link":
            writer.resource_entry(
                "http://example.com/", "2013-01-02T13:00:00Z", links=[("alternate", bad, "")]
            )
        elif place == "loc":
            writer.entry(bad)
        elif place == "lastmod":
            writer.entry("http://example.com/", bad)
        elif place == "md":
            writer.entry("http://example.com/", md={"path": bad})
        elif place == "link":
            writer.entry("http://example.com/", links=[{"rel": "alternate", "href": bad}])
        elif place == "root md":
            writer.start({"capability": "resourcelist", "at": bad})
        elif place == "root link":
            writer.start({"capability": "resourcelist"}, [{"rel": bad, "href": "http://a.b/"}])
        else:
            escape_text(bad)


@pytest.mark.parametrize("character", FORBIDDEN)
def test_lxml_rejects_the_same_characters(character: str) -> None:
    """The forbidden set is lxml's, so the byte-equality claim covers rejection too."""
    with pytest.raises(ValueError):
        etree.Element("loc").text = f"x{character}"
    with pytest.raises(ValueError):
        escape_attribute(f"x{character}")


def test_attribute_order_is_fixed_whatever_the_insertion_order() -> None:
    writer = DocumentWriter("urlset")
    md = {"type": "text/plain", "length": "3", "hash": "md5:ab", "datetime": "D", "change": "C"}
    link = {"href": "http://example.com/b", "type": "text/plain", "rel": "alternate"}

    content = writer.entry("http://example.com/a", md=md, links=[link])

    assert content == (
        b"<url><loc>http://example.com/a</loc>"
        b'<rs:md change="C" datetime="D" hash="md5:ab" length="3" type="text/plain"/>'
        b'<rs:ln rel="alternate" href="http://example.com/b" type="text/plain"/></url>'
    )


def test_empty_values_are_left_out() -> None:
    writer = DocumentWriter("sitemapindex")

    content = writer.entry(
        "http://example.com/a",
        lastmod="",
        md={"at": "", "completed": ""},
        links=[{"rel": "up", "href": "http://example.com/", "type": ""}],
    )

    assert content == (
        b"<sitemap><loc>http://example.com/a</loc>"
        b'<rs:ln rel="up" href="http://example.com/"/></sitemap>'
    )


def test_escaping_matches_libxml2() -> None:
    assert escape_text("a\"b'c<d>e&f\tg\nh\ri") == "a\"b'c&lt;d&gt;e&amp;f\tg\nh&#13;i"
    assert escape_attribute("a\"b'c<d>e&f\tg\nh\ri") == (
        "a&quot;b'c&lt;d&gt;e&amp;f&#9;g&#10;h&#13;i"
    )
    assert escape_attribute("é😀") == "é😀"


def test_entry_bytes_add_up_to_the_document() -> None:
    writer = DocumentWriter("urlset")
    header = writer.start({"capability": "changelist", "from": "2013-01-03T00:00:00Z"})
    entries = [writer.entry(f"http://example.com/{number}é") for number in range(3)]

    document = header + b"".join(entries) + writer.end()

    assert document == render_document(
        "urlset",
        {"capability": "changelist", "from": "2013-01-03T00:00:00Z"},
        entries=[Entry(f"http://example.com/{number}é") for number in range(3)],
    )
    assert len(entries[0]) == len("<url><loc>http://example.com/0é</loc></url>".encode())


@pytest.mark.parametrize(
    "call",
    [
        lambda w: w.entry(""),
        lambda w: w.entry("http://example.com/", md={"capabilty": "typo"}),
        lambda w: w.entry("http://example.com/", md={"rs:type": "text/plain"}),
        lambda w: w.entry("http://example.com/", links=[{"rel": "up"}]),
        lambda w: w.entry("http://example.com/", links=[{"href": "http://example.com/"}]),
        lambda w: w.entry("http://example.com/", links=[{"rel": "up", "href": "h", "x": "1"}]),
        lambda w: w.start({"at": "2013-01-03T09:00:00Z"}),
        lambda w: w.start({"capability": "resourcelist"}, [{"rel": "up"}]),
    ],
    ids=[
        "empty loc",
        "unknown md attribute",
        "prefixed md attribute",
        "link without href",
        "link without rel",
        "unknown link attribute",
        "root without capability",
        "root link without href",
    ],
)
def test_malformed_input_is_refused(call) -> None:
    with pytest.raises(ValueError):
        call(DocumentWriter("urlset"))


def test_unknown_root_is_refused() -> None:
    with pytest.raises(ValueError):
        DocumentWriter("feed")  # type: ignore[arg-type]
