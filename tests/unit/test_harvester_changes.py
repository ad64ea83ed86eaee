"""Choosing changes: inclusive ranges, intersecting documents, latest change wins."""

from __future__ import annotations

import datetime as dt

import pytest

from harvester.changes import Change, in_range, intersects, latest_changes
from sitemaps.protocol.reader import ParsedEntry

START = dt.datetime(2024, 1, 2, tzinfo=dt.UTC)
END = dt.datetime(2024, 1, 3, tzinfo=dt.UTC)


def at(hours: float) -> dt.datetime:
    return START + dt.timedelta(hours=hours)


def change(uri: str, kind: str, when: dt.datetime | None, position: int) -> Change[str]:
    return Change(
        ParsedEntry(loc=uri, change=kind, datetime=when), origin="list", position=position
    )


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (at(-48), at(-24), False),  # closed before the range
        (at(-24), START, True),  # ends exactly at the range start: inclusive
        (END, None, True),  # opens exactly at the range end: inclusive
        (at(25), None, False),  # opens after the range
        (at(-24), None, True),  # open list reaching into the range
        (None, None, True),  # no interval given: must be read
    ],
)
def test_intersects_with_inclusive_bounds(
    start: dt.datetime | None, end: dt.datetime | None, expected: bool
) -> None:
    assert intersects(start, end, START, END) is expected


@pytest.mark.parametrize(
    ("when", "expected"),
    [(at(-0.001), False), (START, True), (at(12), True), (END, True), (at(24.001), False)],
)
def test_change_datetime_range_is_inclusive(when: dt.datetime, expected: bool) -> None:
    assert in_range(ParsedEntry(loc="u", change="updated", datetime=when), START, END) is expected


def test_latest_change_per_resource_wins_in_event_order() -> None:
    changes = [
        change("a", "created", at(1), 0),
        change("b", "updated", at(2), 1),
        change("a", "updated", at(3), 2),
        change("b", "deleted", at(4), 3),
        change("c", "updated", at(-1), 4),  # before the range
        change("a", "deleted", at(30), 5),  # after the range
    ]

    selected = latest_changes(changes, START, END)

    assert [(c.uri, c.kind, c.position) for c in selected] == [
        ("a", "updated", 2),
        ("b", "deleted", 3),
    ]


def test_later_datetime_wins_even_out_of_order_and_position_breaks_ties() -> None:
    changes = [
        change("a", "updated", at(5), 0),
        change("a", "deleted", at(4), 1),  # listed later, happened earlier
        change("b", "updated", at(5), 2),
        change("b", "deleted", at(5), 3),  # same time: the later entry wins
        change("c", "created", at(1), 4),
        change("c", "updated", None, 5),  # no datetime: counts, ranked by position
    ]

    selected = latest_changes(changes, START, END)

    assert [(c.uri, c.kind) for c in selected] == [
        ("a", "updated"),
        ("b", "deleted"),
        ("c", "updated"),
    ]
