"""Planning change notification payloads: consecutive intervals, split under the limits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from lxml import etree

from notifications.payloads import (
    ONE_MICROSECOND,
    change_payloads,
    notification_interval,
)
from sitemaps.protocol.builders import FrameworkChange, build_framework_notification
from sitemaps.protocol.records import ChangeRecord
from tests.support import NS, assert_valid

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def change(key: int, seconds: float, kind: str = "created") -> ChangeRecord:
    return ChangeRecord(
        key=key,
        resource_key=key,
        uri=f"http://data.example.org/r{key}",
        change=kind,
        datetime=T0 + timedelta(seconds=seconds),
        lastmod=T0,
        length=1,
        md5="0cc175b9c0f1b6a831c399e269772661",
        mime="text/plain",
    )


def md(payload: bytes) -> dict[str, str]:
    return dict(etree.fromstring(payload).find("rs:md", NS).attrib)


def locs(payload: bytes) -> list[str]:
    return [
        u.findtext("sm:loc", namespaces=NS) for u in etree.fromstring(payload).findall("sm:url", NS)
    ]


def test_the_next_interval_starts_just_after_the_previous_one():
    since, until = notification_interval(T0, T0 + timedelta(seconds=5), T0 + timedelta(seconds=9))
    assert (since, until) == (T0 + ONE_MICROSECOND, T0 + timedelta(seconds=9))


def test_the_first_interval_starts_at_its_first_change():
    assert notification_interval(None, T0, T0) == (T0, T0)


def test_an_old_dated_change_pulls_the_interval_back():
    early = T0 - timedelta(minutes=1)
    assert notification_interval(T0, early, T0 + timedelta(seconds=1)) == (
        early,
        T0 + timedelta(seconds=1),
    )


def test_one_payload_when_within_the_limits():
    records = [change(1, 1), change(2, 2)]
    (payload,) = change_payloads(records, since=T0, until=T0 + timedelta(seconds=3))
    assert_valid(payload.content)
    assert md(payload.content) == {
        "capability": "change-notification",
        "from": "2026-03-01T12:00:00Z",
        "until": "2026-03-01T12:00:03Z",
    }
    assert payload.entries == 2


def test_large_batches_split_into_consecutive_payloads_cut_between_instants():
    # r3 and r4 share a datetime: the cut moves before them rather than split the instant.
    records = [change(1, 1), change(2, 2), change(3, 3), change(4, 3), change(5, 4)]
    until = T0 + timedelta(seconds=10)
    payloads = change_payloads(records, since=T0, until=until, max_entries=3)
    assert [p.entries for p in payloads] == [2, 3]
    first, second = payloads
    assert (first.since, first.until) == (T0, T0 + timedelta(seconds=2))
    assert (second.since, second.until) == (T0 + timedelta(seconds=2) + ONE_MICROSECOND, until)
    assert locs(second.content)[0].endswith("/r3")
    for payload in payloads:
        assert_valid(payload.content)


def test_an_instant_with_more_changes_than_a_payload_holds_is_cut_where_full():
    records = [change(n, 1) for n in range(1, 6)]
    payloads = change_payloads(records, since=T0, until=T0 + timedelta(seconds=1), max_entries=2)
    assert [p.entries for p in payloads] == [2, 2, 1]
    instant = T0 + timedelta(seconds=1)
    assert [p.since for p in payloads] == [T0, instant, instant]


def test_the_byte_limit_splits_too():
    records = [change(n, n) for n in range(1, 5)]
    one = len(change_payloads(records[:1], since=T0, until=T0 + timedelta(seconds=1))[0].content)
    payloads = change_payloads(
        records, since=T0, until=T0 + timedelta(seconds=9), max_bytes=4096 + 2 * (one - 300)
    )
    assert len(payloads) > 1
    assert sum(p.entries for p in payloads) == 4


def test_no_changes_no_payload():
    assert change_payloads([], since=T0, until=T0) == []


def test_framework_notification_payload():
    payload = build_framework_notification(
        [
            FrameworkChange(
                "http://x.org/rl-2.xml", "resourcelist", "created", T0, "http://x.org/rl.xml"
            ),
            FrameworkChange("http://x.org/cl-1.xml", "changelist", "updated", T0),
        ],
        up_url="http://x.org/capabilitylist.xml",
    )
    assert_valid(payload)
    assert payload.endswith(
        b'<url><loc>http://x.org/rl-2.xml</loc><rs:md capability="resourcelist" change="created"'
        b' datetime="2026-03-01T12:00:00Z"/><rs:ln rel="index" href="http://x.org/rl.xml"/></url>'
        b'<url><loc>http://x.org/cl-1.xml</loc><rs:md capability="changelist" change="updated"'
        b' datetime="2026-03-01T12:00:00Z"/></url></urlset>'
    )
    assert md(payload) == {"capability": "framework-notification"}
