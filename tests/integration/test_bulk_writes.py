"""The ingestion writer stores what the ORM reads back, on each database the suite runs on.

On PostgreSQL the writer bypasses Django's cursor (server-side binding,
COPY for inserts); these tests hold it to the same rows and the same errors.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from sources.bulk import BulkWriter, keys_by_uri, known_event_ids
from sources.models import Change, Resource
from sources.services import ChangeRow, ResourceRow
from tests.support import make_set

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
ELSEWHERE = datetime(2025, 6, 1, 12, 0, tzinfo=timezone(timedelta(hours=5, minutes=30)))
LINKS = [
    {"rel": "describedby", "href": {"type": "url", "value": 'http://x/é"<&\u2028'}, "uri": "u"},
    {"rel": "alternate", "href": {"type": "url", "value": "http://x/b"}, "mime": "text/html"},
]


def resource_row(set_id: int, n: int, **fields) -> ResourceRow:
    values = {
        "resource_set": set_id, "uri": f"http://x/{n}", "location_type": "url",
        "location_value": f"http://x/{n}", "length": n, "md5": f"{n:032x}", "sha256": "",
        "mime": "text/plain", "lastmod": ELSEWHERE, "ln": LINKS, "timestamp": NOW,
    }  # fmt: skip
    return ResourceRow(**{**values, **fields})


def change_row(set_id: int, n: int, event_id: str) -> ChangeRow:
    return ChangeRow(
        resource_set=set_id, resource_key=None, change="deleted", location_type="url",
        location_value=f"http://x/{n}", uri=f"http://x/{n}", length=None, md5="", sha256="",
        mime="", lastmod=None, ln=[], datetime=NOW, timestamp=NOW, event_id=event_id,
        indexed=False,
    )  # fmt: skip


def test_inserted_and_updated_rows_read_back_as_written():
    resource_set = make_set()
    writer = BulkWriter(Resource, ResourceRow)

    writer.insert([resource_row(resource_set.pk, n) for n in range(3)])
    keys = keys_by_uri(resource_set.pk, ["http://x/1"])
    writer.update(
        [resource_row(resource_set.pk, 1, ln=[], length=7, mime="")], [keys["http://x/1"]]
    )

    stored = {r.uri: r for r in Resource.objects.filter(resource_set=resource_set)}
    assert set(stored) == {"http://x/0", "http://x/1", "http://x/2"}
    first = stored["http://x/0"]
    assert (first.ln, first.lastmod, first.timestamp, first.length) == (LINKS, ELSEWHERE, NOW, 0)
    assert (stored["http://x/1"].ln, stored["http://x/1"].length) == ([], 7)
    assert stored["http://x/1"].mime == ""


def test_one_update_of_many_rows_gives_each_row_its_own_values():
    resource_set = make_set()
    writer = BulkWriter(Resource, ResourceRow)
    writer.insert([resource_row(resource_set.pk, n) for n in range(5)])
    keys = keys_by_uri(resource_set.pk, [f"http://x/{n}" for n in (3, 0, 4)])
    changed = {
        3: {"ln": [], "length": 30, "lastmod": NOW, "mime": "text/é", "md5": ""},
        0: {"ln": LINKS[:1], "length": 2**40, "lastmod": ELSEWHERE, "sha256": "s" * 64},
        4: {"ln": LINKS[::-1], "length": 0, "location_value": "a'b\"c\\d{e},f", "uri": "http://x/4"},
    }  # fmt: skip

    writer.update(
        [resource_row(resource_set.pk, n, **fields) for n, fields in changed.items()],
        [keys[f"http://x/{n}"] for n in changed],
    )

    stored = {r.uri: r for r in Resource.objects.filter(resource_set=resource_set)}
    for n, fields in changed.items():
        row = stored[f"http://x/{n}"]
        assert {name: getattr(row, name) for name in fields} == fields
        assert row.pk == keys[f"http://x/{n}"]
    untouched = [stored[f"http://x/{n}"] for n in (1, 2)]
    assert [(row.length, row.ln) for row in untouched] == [(1, LINKS), (2, LINKS)]


def test_an_update_needs_a_key_for_each_row():
    resource_set = make_set()
    writer = BulkWriter(Resource, ResourceRow)
    writer.insert([resource_row(resource_set.pk, n) for n in range(2)])
    keys = list(keys_by_uri(resource_set.pk, ["http://x/0", "http://x/1"]).values())

    with pytest.raises(ValueError, match="2 rows for 1 keys"):
        writer.update([resource_row(resource_set.pk, n, length=9) for n in range(2)], keys[:1])

    assert set(Resource.objects.values_list("length", flat=True)) == {0, 1}


def test_keys_are_found_across_lookup_chunks_and_only_in_their_set():
    resource_set, other = make_set(), make_set(slug="other")
    writer = BulkWriter(Resource, ResourceRow)
    writer.insert([resource_row(resource_set.pk, n) for n in range(2500)])
    writer.insert([resource_row(other.pk, n) for n in range(2600, 2610)])
    asked = [f"http://x/{n}" for n in range(0, 2700, 3)]

    keys = keys_by_uri(resource_set.pk, asked)

    ids = dict(Resource.objects.filter(resource_set=resource_set).values_list("uri", "id"))
    assert keys == {uri: ids[uri] for uri in asked if uri in ids}
    assert len(keys) == 834


def test_known_event_ids_are_the_sets_own():
    resource_set, other = make_set(), make_set(slug="other")
    writer = BulkWriter(Change, ChangeRow)
    writer.insert([change_row(resource_set.pk, n, f"e{n}") for n in range(3)])
    writer.insert([change_row(resource_set.pk, 9, "")])
    writer.insert([change_row(other.pk, n, f"o{n}") for n in range(3)])

    known = known_event_ids(resource_set.pk, ["e2", "e0", "o1", "new", "e2"])

    assert known == {"e0", "e2"}


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's query planner")
def test_lookups_by_event_id_and_uri_probe_the_sets_unique_indexes():
    """Each ingested batch asks which of its event ids and URIs the set holds. With
    `event_id <> ''` SQLite could not use the partial index (its condition is
    `NOT (event_id = '')`) and read every change of the set per 2,000 ids."""
    resource_set = make_set()
    with CaptureQueriesContext(connection) as queries:
        known_event_ids(resource_set.pk, ["e1", "e2"])
        keys_by_uri(resource_set.pk, ["http://x/1"])
    with connection.cursor() as cursor:
        plans = []
        for query in queries:
            cursor.execute(f"EXPLAIN QUERY PLAN {query['sql']}")
            plans.append(" ".join(row[-1] for row in cursor.fetchall()))
    assert len(plans) == 2
    assert "INDEX unique_event_id_per_set (resource_set_id=? AND event_id=?)" in plans[0]
    assert "(resource_set_id=? AND uri=?)" in plans[1]  # the unique (set, uri) index


def test_changes_get_ids_from_the_sequence_after_the_orms():
    resource_set = make_set()
    before = Change.objects.create(**change_row(resource_set.pk, 0, "a")._asdict() | {
        "resource_set": resource_set})  # fmt: skip

    BulkWriter(Change, ChangeRow).insert([change_row(resource_set.pk, n, "") for n in (1, 2)])

    ids = list(
        Change.objects.filter(resource_set=resource_set).order_by("id").values_list("id", "uri")
    )
    assert ids[0] == (before.pk, "http://x/0")
    assert [uri for _, uri in ids[1:]] == ["http://x/1", "http://x/2"]
    assert ids[1][0] > before.pk


def test_a_duplicate_is_djangos_integrity_error_and_leaves_nothing():
    resource_set = make_set()
    writer = BulkWriter(Change, ChangeRow)
    writer.insert([change_row(resource_set.pk, 0, "same")])

    with pytest.raises(IntegrityError), transaction.atomic():
        writer.insert(
            [change_row(resource_set.pk, 1, "other"), change_row(resource_set.pk, 2, "same")]
        )

    assert list(Change.objects.values_list("event_id", flat=True)) == ["same"]


@pytest.mark.parametrize(
    "lastmod",
    [
        ELSEWHERE,
        NOW,
        datetime(99, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ],
)
def test_the_database_generator_reads_lastmod_back_in_utc(lastmod):
    from sources.generators.database import DatabaseGenerator

    resource_set = make_set()
    BulkWriter(Resource, ResourceRow).insert(
        [resource_row(resource_set.pk, 1, lastmod=lastmod, ln=[])]
    )

    (record,) = DatabaseGenerator().iter_resources(resource_set)

    assert record.lastmod == lastmod and record.lastmod.tzinfo is UTC


def test_an_update_leaves_the_fixed_fields_as_stored():
    resource_set = make_set()
    writer = BulkWriter(Resource, ResourceRow, fixed=("resource_set", "uri"))
    writer.insert([resource_row(resource_set.pk, n) for n in range(2)])
    key = keys_by_uri(resource_set.pk, ["http://x/1"])["http://x/1"]

    writer.update([resource_row(resource_set.pk, 1, uri="http://x/moved", length=5)], [key])

    stored = Resource.objects.get(pk=key)
    assert (stored.uri, stored.resource_set_id, stored.length) == ("http://x/1", resource_set.pk, 5)


def test_a_fixed_field_must_be_one_of_the_rows():
    with pytest.raises(TypeError, match=r"fixed fields not in ResourceRow: \['url'\]"):
        BulkWriter(Resource, ResourceRow, fixed=("url",))


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's prepared statements")
def test_the_batch_statements_stay_unprepared(settings):
    """Only the document lookup is prepared: a batch's arrays vary in length, and a generic
    plan for them was never measured against ingestion."""
    resource_set = make_set()
    writer = BulkWriter(Resource, ResourceRow)
    writer.insert([resource_row(resource_set.pk, n) for n in range(3)])
    for _ in range(settings.DATABASES["default"]["OPTIONS"]["prepare_threshold"] + 1):
        keys = keys_by_uri(resource_set.pk, ["http://x/0", "http://x/2"])
        writer.update([resource_row(resource_set.pk, 0, length=9)], [keys["http://x/0"]])
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone() == (0,)
