"""Resources' `record` doc values are read straight from a search response's bytes."""

from __future__ import annotations

import base64
import json

import orjson
import pytest

from sources.generators.elasticsearch import record_values


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
