"""Where incremental runs start and end, and when the sync point moves."""

from __future__ import annotations

import datetime as dt
from unittest.mock import Mock

import pytest

from harvester.report import SyncReport
from harvester.state import SyncState
from harvester.sync import incremental_range, next_sync_point
from harvester.walk import HarvestError

URL = "https://source.example.org/capabilitylist.xml"
T1 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
T2 = dt.datetime(2024, 1, 2, tzinfo=dt.UTC)
T3 = dt.datetime(2024, 1, 3, tzinfo=dt.UTC)


def test_default_range_runs_from_the_last_sync_point_to_now() -> None:
    state = SyncState(capability_list_url=URL, synced_until=T1)

    assert incremental_range(state, None, None, now=T3) == (T1, T3)
    assert incremental_range(state, T2, None, now=T3) == (T2, T3)


def test_no_sync_point_and_no_start_is_an_error() -> None:
    with pytest.raises(HarvestError, match="run a baseline"):
        incremental_range(SyncState(capability_list_url=URL), None, None, now=T3)


def test_range_must_not_end_before_it_starts() -> None:
    with pytest.raises(HarvestError, match="after it ends"):
        incremental_range(SyncState(capability_list_url=URL), T3, T1, now=T3)


@pytest.mark.parametrize(
    ("previous", "start", "end", "expected"),
    [
        (None, T1, T3, T3),  # first incremental
        (T2, T1, T3, T3),  # overlapping range: moves on
        (T2, T2, T3, T3),  # contiguous range: moves on
        (T3, T1, T2, None),  # a past range never moves it back
        (T1, T2, T3, None),  # a gap before the range: stays
    ],
)
def test_sync_point_moves_only_over_contiguous_ranges(
    previous: dt.datetime | None, start: dt.datetime, end: dt.datetime, expected: dt.datetime | None
) -> None:
    session = Mock(state=SyncState(capability_list_url=URL, synced_until=previous))
    session.report = SyncReport(mode="incremental")

    assert next_sync_point(session, start, end) == expected
