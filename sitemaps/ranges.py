"""Rows that own a key range `(after_key, through_key]`: Resource List pages and
Resource Dump packages. `planning` decides on ranges; this applies a split to rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from django.db import transaction

from .planning import KeyRange, split


class RangeRow(Protocol):
    pk: Any
    number: int
    after_key: int
    through_key: int | None

    def save(self, *args: Any, **kwargs: Any) -> None: ...


Row = TypeVar("Row", bound=RangeRow)


def key_range(row: RangeRow) -> KeyRange:
    return KeyRange(after=row.after_key, through=row.through_key)


def split_ranges(
    rows: Sequence[RangeRow], row: RangeRow, last_key: int
) -> tuple[KeyRange, KeyRange]:
    """The two ranges `row` becomes when closed at `last_key`: its own, and the rest's."""
    position = rows.index(row)
    head, rest = split([key_range(r) for r in rows], position, last_key)[position : position + 2]
    return head, rest


def split_row(rows: list[Row], row: Row, last_key: int, **fields: Any) -> Row:
    """Close `row` at `last_key`; a new row after it (next number, `fields`) takes the rest.

    One transaction, so a crash between the two writes leaves neither.
    """
    head, rest = split_ranges(rows, row, last_key)
    position = rows.index(row)
    with transaction.atomic():
        row.through_key = head.through
        row.save(update_fields=["through_key"])
        created = type(row).objects.create(  # type: ignore[attr-defined]
            number=max(r.number for r in rows) + 1,
            after_key=rest.after,
            through_key=rest.through,
            **fields,
        )
    rows.insert(position + 1, created)
    return created
