"""The hot paths' SQL expressions give what the ORM's own lookups and converters give."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sources.expressions import AnyOf, UtcText
from sources.models import Change, Resource

from ..support import created, event, ingest, make_set

pytestmark = pytest.mark.django_db


def test_any_of_finds_the_rows_pk_in_finds():
    resource_set = make_set()
    created(resource_set, 30)
    keys = list(Resource.objects.order_by("pk").values_list("pk", flat=True))
    wanted = keys[::3]

    found = Resource.objects.filter(AnyOf("pk", wanted)).values_list("pk", flat=True)

    by_in = Resource.objects.filter(pk__in=wanted).values_list("pk", flat=True)
    assert sorted(found) == sorted(by_in) == wanted


def test_any_of_nothing_finds_nothing_and_updates_nothing_without_a_query(
    django_assert_num_queries,
):
    created(make_set(), 2)

    with django_assert_num_queries(0):
        assert not list(Resource.objects.filter(AnyOf("pk", [])))
        assert Change.objects.filter(AnyOf("pk", [])).update(indexed=True) == 0


def test_any_of_takes_more_keys_than_a_statement_takes_parameters():
    """SQLite refuses statements of over 32,766 parameters, PostgreSQL of over 65,535."""
    created(make_set(), 3)
    first = Resource.objects.order_by("pk").values_list("pk", flat=True)[0]
    keys = [first, *range(10**9, 10**9 + 70_000)]

    assert list(Resource.objects.filter(AnyOf("pk", keys)).values_list("pk", flat=True)) == [first]


@pytest.mark.parametrize(
    "lastmod",
    [
        "2026-01-02T03:04:05.100000+00:00",
        "2026-01-02T03:04:05+00:00",
        "2026-01-02T03:04:05.000001+02:00",
        "1999-12-31T23:59:59.999999-05:30",
        "2026-01-02T03:04:05.123450+00:00",
    ],
)
def test_utc_text_reads_the_datetime_the_orm_reads(lastmod):
    resource_set = make_set()
    ingest(resource_set, [event("created", "r/1", lastmod=datetime.fromisoformat(lastmod))])
    row = Resource.objects.annotate(text=UtcText("lastmod")).values("lastmod", "text").get()

    assert datetime.fromisoformat(row["text"]) == row["lastmod"] == datetime.fromisoformat(lastmod)
    assert datetime.fromisoformat(row["text"]).tzinfo == UTC
    assert datetime.fromisoformat(row["text"]).isoformat() == row["lastmod"].isoformat()
    assert UtcText.isoformat(row["text"]) == row["lastmod"].isoformat()


@pytest.mark.parametrize(
    "text",
    [
        "2026-01-02 03:04:05+00:00",
        "2026-01-02 03:04:05.123456+00:00",
        "2026-01-02 03:04:05.1+00:00",
        "2026-01-02 03:04:05.12345+00:00",
        "0001-01-01 00:00:00.000001+00:00",
    ],
)
def test_utc_text_isoformat_is_the_parsed_datetimes(text):
    """Slicing stands for parsing and formatting, whichever shape the database writes."""
    assert UtcText.isoformat(text) == datetime.fromisoformat(text).isoformat()
