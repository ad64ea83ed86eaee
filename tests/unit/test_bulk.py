"""The ingestion writer's own adapters store exactly what Django's would."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import connection
from django.db.backends.sqlite3.base import DatabaseWrapper

from sources.bulk import _sqlite_datetime, _sqlite_json

#: Django's own SQLite operations, whichever database the suite runs on.
SQLITE = DatabaseWrapper({**connection.settings_dict, "NAME": ":memory:", "OPTIONS": {}}).ops

MOMENTS = [
    datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
    datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-8))),
    datetime(2026, 1, 2, 3, 4, 5),  # naive: passed through as Django does
    None,
]


@pytest.mark.parametrize("moment", MOMENTS)
def test_datetimes_match_djangos_adapter(moment):
    assert _sqlite_datetime(moment) == SQLITE.adapt_datetimefield_value(moment)


@pytest.mark.parametrize(
    "value",
    [[], [{"rel": "describedby", "href": {"type": "url", "value": 'http://x/é"<&'}}], {"a": None}],
)
def test_json_reads_back_equal(value):
    assert json.loads(_sqlite_json(value)) == value
