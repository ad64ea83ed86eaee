"""Page-range planning: which ranges to rebuild and how ranges change, without a database."""

from __future__ import annotations

import pytest

from sitemaps.planning import (
    KeyRange,
    Plan,
    Step,
    after_build,
    changed_positions,
    contiguous,
    merge_into_next,
    plan_rebuild,
    ranges_holding,
    split,
)

# Three pages: keys 1-100, 101-200 and the open tail from 201.
PAGES = [KeyRange(0, 100), KeyRange(100, 200), KeyRange(200, None)]


def test_a_range_holds_the_keys_after_its_start_through_its_end():
    assert [KeyRange(100, 200).holds(key) for key in (100, 101, 200, 201)] == [
        False,
        True,
        True,
        False,
    ]
    assert KeyRange(200).holds(10**12)


def test_touched_keys_mark_the_ranges_holding_them():
    starts = [r.after for r in PAGES]
    assert ranges_holding(starts, [1, 100]) == {0}
    assert ranges_holding(starts, [101, 200, 201]) == {1, 2}
    assert ranges_holding(starts, [10**9]) == {2}  # a new key lands on the tail
    assert ranges_holding(starts, []) == set()


def test_plan_rebuild_lists_dirty_positions():
    assert plan_rebuild(PAGES, [150, 160, 5]) == Plan(dirty=frozenset({0, 1}))
    assert plan_rebuild([], [1]) == Plan(dirty=frozenset())


def test_a_full_tail_gaining_only_new_keys_is_closed_not_rewritten():
    """Issue 11: one create when the tail is exactly full writes only the new page."""
    plan = plan_rebuild(PAGES, [301, 302], full_tail_last_key=300)
    assert plan == Plan(dirty=frozenset({3}), close_tail_at=300)


def test_a_full_tail_whose_entries_changed_is_rebuilt_and_splits_by_itself():
    plan = plan_rebuild(PAGES, [250, 301], full_tail_last_key=300)
    assert plan == Plan(dirty=frozenset({2}))


def test_a_tail_that_is_not_full_takes_new_keys_itself():
    assert plan_rebuild(PAGES, [301]) == Plan(dirty=frozenset({2}))


def test_a_full_tail_with_changes_elsewhere_only_is_left_alone():
    assert plan_rebuild(PAGES, [50], full_tail_last_key=300) == Plan(dirty=frozenset({0}))


@pytest.mark.parametrize(
    ("entries", "overflowed", "last_key", "is_last", "count", "step"),
    [
        (100, False, 100, False, 3, Step.KEEP),
        (100, True, 90, False, 3, Step.SPLIT),  # overflowed: close at the last key that fit
        (100, True, 90, True, 3, Step.SPLIT),
        (0, False, None, False, 3, Step.MERGE),  # emptied: give its keys to the next
        (0, False, None, True, 3, Step.KEEP),  # the tail stays, even empty
        (0, False, None, True, 1, Step.KEEP),  # a set keeps one page
    ],
)
def test_after_build(entries, overflowed, last_key, is_last, count, step):
    found = after_build(
        entries=entries, overflowed=overflowed, last_key=last_key, is_last=is_last, count=count
    )
    assert found is step


def test_split_closes_the_range_at_its_last_key_and_opens_the_rest_after_it():
    assert split(PAGES, 1, 150) == [
        KeyRange(0, 100),
        KeyRange(100, 150),
        KeyRange(150, 200),
        KeyRange(200, None),
    ]
    assert split(PAGES, 2, 250)[2:] == [KeyRange(200, 250), KeyRange(250, None)]


def test_split_refuses_a_key_outside_the_range():
    with pytest.raises(ValueError, match="does not hold"):
        split(PAGES, 1, 250)


def test_an_emptied_range_merges_into_the_next():
    assert merge_into_next(PAGES, 0) == [KeyRange(0, 200), KeyRange(200, None)]
    assert merge_into_next(PAGES, 1) == [KeyRange(0, 100), KeyRange(100, None)]
    with pytest.raises(ValueError, match="no next range"):
        merge_into_next(PAGES, 2)


def test_contiguous_ranges_stay_as_they_are():
    assert contiguous(PAGES) == PAGES
    assert changed_positions(PAGES, contiguous(PAGES)) == set()


def test_two_open_ranges_left_by_a_crash_in_a_split_are_repaired():
    """The old page kept `through=None` while the new one after it was committed."""
    broken = [KeyRange(0, 100), KeyRange(100, None), KeyRange(150, None)]
    fixed = contiguous(broken)
    assert fixed == [KeyRange(0, 100), KeyRange(100, 150), KeyRange(150, None)]
    assert changed_positions(broken, fixed) == {1}


def test_gaps_overlaps_and_a_closed_tail_are_repaired():
    broken = [KeyRange(5, 90), KeyRange(100, 260), KeyRange(250, 300)]
    assert contiguous(broken) == [KeyRange(0, 100), KeyRange(100, 250), KeyRange(250, None)]
    assert changed_positions(broken, contiguous(broken)) == {0, 1, 2}
    assert contiguous([]) == []
