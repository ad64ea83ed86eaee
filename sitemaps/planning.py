"""Which key ranges must be (re)built: pure functions, no database, no storage.

A paged document (a Resource List page today, a dump package tomorrow) owns
the keys in `(after, through]`; the ranges tile every key from 0 up, and only
the last one is open (`through is None`) so new keys always land on it.
Regeneration asks three questions, answered here:

- which ranges hold the keys that changed (`plan_rebuild`), and whether a full
  tail can simply be closed instead of rewritten;
- what to do with a range once built (`after_build`): keep it, split it where
  it overflowed, or merge it into the next one when it emptied;
- how to put ranges back in order after a crash left them overlapping or
  with gaps (`contiguous`).
"""

from __future__ import annotations

import bisect
import enum
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

#: Touched keys read from the change log per round trip.
KEYS_PER_FETCH = 10_000


@dataclass(frozen=True)
class KeyRange:
    """The keys in `(after, through]`; `through` None is the open tail."""

    after: int
    through: int | None = None

    def holds(self, key: int) -> bool:
        return self.after < key and (self.through is None or key <= self.through)


def holder(starts: Sequence[int], key: int) -> int:
    """Position of the range holding `key`, given the ranges' sorted `after` keys."""
    # The greatest `after` below the key; keys below the first range go to it.
    return max(bisect.bisect_left(starts, key) - 1, 0)


def ranges_holding(starts: Sequence[int], keys: Iterable[int]) -> set[int]:
    """Positions of the ranges that hold any of these keys."""
    return {holder(starts, key) for key in keys}


@dataclass(frozen=True)
class Plan:
    """What a change of keys asks for.

    `dirty`: positions to rebuild. `close_tail_at`: a full tail whose entries
    did not change is closed at this key, and a new open range after it
    (position `len(ranges)`, listed in `dirty`) takes the new keys.
    """

    dirty: frozenset[int]
    close_tail_at: int | None = None


def plan_rebuild(
    ranges: Sequence[KeyRange], keys: Iterable[int], *, full_tail_last_key: int | None = None
) -> Plan:
    """The ranges these touched keys make dirty.

    `full_tail_last_key` is the greatest key of the tail when the tail is
    already full: if every touched key in the tail lies past it (new keys
    only), the tail's entries are unchanged, so it is closed, not rewritten.
    """
    if not ranges:
        return Plan(dirty=frozenset())
    starts = [r.after for r in ranges]
    tail = len(ranges) - 1
    dirty: set[int] = set()
    past_full_tail = False
    for key in keys:
        position = holder(starts, key)
        if position == tail and full_tail_last_key is not None and key > full_tail_last_key:
            past_full_tail = True
        else:
            dirty.add(position)
    if not past_full_tail:
        return Plan(dirty=frozenset(dirty))
    if tail in dirty:  # its entries changed too: rebuild it, it splits by itself
        return Plan(dirty=frozenset(dirty))
    return Plan(dirty=frozenset(dirty | {tail + 1}), close_tail_at=full_tail_last_key)


class Step(enum.Enum):
    """What to do with a range once its document is built."""

    KEEP = "keep"  # store it as it is
    SPLIT = "split"  # it overflowed: close it at its last key, the rest goes to a new range
    MERGE = "merge"  # it emptied: its keys go to the next range and it goes


def after_build(
    *, entries: int, overflowed: bool, last_key: int | None, is_last: bool, count: int
) -> Step:
    """The step for one built range among `count`."""
    if overflowed and last_key is not None:
        return Step.SPLIT
    if entries == 0 and not is_last and count > 1:
        return Step.MERGE
    return Step.KEEP


def split(ranges: Sequence[KeyRange], position: int, last_key: int) -> list[KeyRange]:
    """The range at `position` closed at `last_key`, and a new one after it for the rest."""
    old = ranges[position]
    if not old.holds(last_key):
        raise ValueError(f"{old} does not hold key {last_key}")
    head = replace(old, through=last_key)
    rest = KeyRange(after=last_key, through=old.through)
    return [*ranges[:position], head, rest, *ranges[position + 1 :]]


def merge_into_next(ranges: Sequence[KeyRange], position: int) -> list[KeyRange]:
    """The range at `position` gone, the next one starting where it started."""
    if position >= len(ranges) - 1:
        raise ValueError("the last range has no next range to merge into")
    following = replace(ranges[position + 1], after=ranges[position].after)
    return [*ranges[:position], following, *ranges[position + 2 :]]


def contiguous(ranges: Sequence[KeyRange]) -> list[KeyRange]:
    """The ranges (sorted by `after`) made to tile every key again.

    The first starts at 0, each ends where the next begins and the last is
    open. A run killed between two range writes can leave two open ranges or
    a gap; the positions whose range changed must be rebuilt.
    """
    fixed = [replace(r, through=nxt.after) for r, nxt in itertools.pairwise(ranges)]
    if ranges:
        fixed.append(replace(ranges[-1], through=None))
        fixed[0] = replace(fixed[0], after=0)
    return fixed


def changed_positions(before: Sequence[KeyRange], after: Sequence[KeyRange]) -> set[int]:
    """Positions whose range differs between two lists of the same length."""
    return {n for n, (old, new) in enumerate(zip(before, after, strict=True)) if old != new}
