"""Rewriting URLs goes through the reader and the writer: nothing else in a document moves."""

from __future__ import annotations

from datetime import UTC, datetime

from sitemaps.protocol.builders import (
    ChangeListPart,
    build_change_list,
    build_change_list_index,
    build_resource_list,
)
from sitemaps.protocol.reader import parse_document
from sitemaps.protocol.records import ChangeRecord, Link, ResourceRecord
from sitemaps.rewriting import PrefixRewrite, rewrite_document

T = datetime(2026, 3, 1, 12, 0, 0, 123400, tzinfo=UTC)
OLD = "http://portal.example.org/resourcesync/acme/a/"
NEW = "https://static.example.net/copy/"


def resource_list() -> bytes:
    records = [
        ResourceRecord(
            1, "http://data.example.org/a&b <c>.txt", T, 10, "0" * 32, "text/plain", "f" * 64,
            (Link("describedby", "http://data.example.org/a.xml", "application/xml"),),
        ),
        ResourceRecord(2, "http://data.example.org/caf\u00e9", T, 0, "1" * 32, "text/plain"),
    ]  # fmt: skip
    return build_resource_list(
        records, at=T, capability_list_url=OLD + "capabilitylist.xml", index_url=OLD + "rl.xml"
    ).content


def change_list() -> bytes:
    records = [
        ChangeRecord(1, 1, "http://data.example.org/x", "created", T, T, 3, "2" * 32, "text/x"),
        ChangeRecord(2, 1, "http://data.example.org/x", "deleted", T),
    ]
    return build_change_list(
        records, since=T, until=T, capability_list_url=OLD + "capabilitylist.xml"
    ).content


def test_a_document_without_urls_to_move_comes_back_byte_for_byte():
    index = build_change_list_index(
        [ChangeListPart(OLD + "changelist-1.xml", T, T), ChangeListPart(OLD + "cl-2.xml", T)],
        since=T,
        capability_list_url=OLD + "capabilitylist.xml",
    )
    for content in (resource_list(), change_list(), index):
        _, rewritten = rewrite_document(content, lambda url: url)
        assert rewritten == content


def test_only_urls_under_a_prefix_move():
    rewrite = PrefixRewrite({OLD: NEW, "http://data.example.org/": NEW + "files/"})
    _, rewritten = rewrite_document(resource_list(), rewrite)

    document = parse_document(rewritten)
    assert document.link("up").href == NEW + "capabilitylist.xml"
    assert document.link("index").href == NEW + "rl.xml"
    assert [e.loc for e in document.entries] == [
        NEW + "files/a&b <c>.txt",
        NEW + "files/caf\u00e9",
    ]
    assert document.entries[0].links[0].href == NEW + "files/a.xml"
    assert document.entries[0].hash == {"md5": "0" * 32, "sha-256": "f" * 64}
    assert document.at == T


def test_the_longest_prefix_wins():
    rewrite = PrefixRewrite({"http://a/": "http://b/", "http://a/files/": "http://c/"})
    assert rewrite("http://a/files/x") == "http://c/x"
    assert rewrite("http://a/y") == "http://b/y"
    assert rewrite("http://other/z") == "http://other/z"
