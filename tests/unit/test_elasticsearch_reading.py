"""Resources' `record` doc values are read straight from a search response's bytes."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import orjson
import pytest

from sitemaps.protocol.constants import w3c_datetime
from sources.generators.elasticsearch import record_values
from sources.generators.records import w3c_lastmods


def value(key: int) -> str:
    return base64.b64encode(orjson.dumps([key, f"https://example.org/r/{key}", []])).decode()


def hits(*keys: int) -> dict:
    return {"hits": {"hits": [{"fields": {"record": [value(key)]}} for key in keys]}}


def test_values_come_out_of_a_compact_body_in_order():
    body = orjson.dumps(hits(1, 22, 333))
    assert record_values(body) == [value(key).encode() for key in (1, 22, 333)]


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(hits(1, 22, 333), indent=2).encode(),  # another layout
        orjson.dumps(
            {
                "hits": {
                    "hits": [
                        {"fields": {"record": [value(1)]}, "sort": [1]},
                        *hits(22, 333)["hits"]["hits"],
                    ]
                }
            }
        ),
    ],
    ids=["pretty", "other-fields"],
)
def test_a_body_laid_out_otherwise_gives_the_same_values(body):
    assert record_values(body) == [value(key).encode() for key in (1, 22, 333)]


def test_a_search_without_hits_gives_none():
    assert record_values(b"{}") == []


LASTMODS = [
    datetime(2026, 3, 1, 12, 0, tzinfo=UTC).replace(microsecond=micro)
    for micro in (0, 500_000, 500, 123_456, 1, 999_999, 100_000, 10)
] + [datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, 990_000, tzinfo=UTC)]


def test_lastmods_come_out_as_w3c_datetime_writes_them():
    texts = [lastmod.isoformat() for lastmod in LASTMODS]
    assert w3c_lastmods(texts) == [w3c_datetime(lastmod) for lastmod in LASTMODS]


@pytest.mark.parametrize(
    "odd",
    [
        "2026-03-01T12:00:00+02:00",  # not in UTC: left to the records
        "2026-03-01T12:00:00",  # naive: `w3c_datetime` raises
        "2026-03-01T12:00:00.000000+00:00",  # a fraction isoformat() never writes
        "2026-03-01T12:00:00.5+00:00",
        "2026-03-01 12:00:00+00:00",
        "2026-03-01T12:00:0٣+00:00",
        None,
    ],
)
def test_a_batch_with_a_lastmod_of_another_shape_gives_no_columns(odd):
    assert w3c_lastmods([LASTMODS[1].isoformat(), odd]) is None
