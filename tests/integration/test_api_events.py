"""POST /api/v1/sets/<provider>/<set>/events: what a client sends and what it gets back."""

from __future__ import annotations

import gzip
import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from sources.api import parsers
from sources.api.parsers import (
    BodyTooLarge,
    JSONEventsParser,
    MalformedEvent,
    iter_json,
    iter_ndjson,
    read_chunks,
)
from sources.api.serializers import EventSerializer, LinkSerializer, LocationSerializer
from sources.api.validation import EVENT_FIELDS, LINK_FIELDS, LOCATION_FIELDS
from sources.models import ApiToken, Change, Resource, ResourceSet
from tests.factories import ApiTokenFactory, ResourceFactory, ResourceSetFactory

MD5 = "9e107d9d372bb6826bd81d3542a419d6"
SHA256 = "d7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592"
PREFIX = "https://data.example.org/reports/"


@pytest.fixture
def resource_set(db) -> ResourceSet:
    return ResourceSetFactory(
        provider__slug="acme", slug="reports", url_prefix=PREFIX, resource_root_dir="/srv/data"
    )


@pytest.fixture
def token(resource_set: ResourceSet) -> ApiToken:
    return ApiTokenFactory(provider=resource_set.provider)


def event(change: str = "created", value: str = "a.txt", **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "change": change,
        "location": {"type": "rel_path", "value": value},
        "length": 43,
        "md5": MD5,
        "mime": "text/plain",
        "lastmod": "2024-05-01T10:00:00Z",
    }
    data.update(fields)
    return {key: item for key, item in data.items() if item is not None}


def post(
    client: Client,
    token: ApiToken,
    body: object,
    *,
    content_type: str = "application/json",
    path: tuple[str, str] = ("acme", "reports"),
) -> Any:
    if isinstance(body, list | dict):
        body = json.dumps(body)
    url = reverse("api:events", args=path)
    return client.post(
        url,
        data=body,
        content_type=content_type,
        headers={"Authorization": f"Token {token.plain_key}"},
    )


def ndjson(*events: dict[str, Any]) -> str:
    return "\n".join(json.dumps(item) for item in events) + "\n"


def counts(accepted=0, created=0, updated=0, deleted=0, duplicates=0) -> dict[str, int]:
    return {
        "accepted": accepted,
        "created": created,
        "updated": updated,
        "deleted": deleted,
        "duplicates": duplicates,
    }


# --- Accepted requests --------------------------------------------------------------------


def test_one_event_object_creates_a_resource_and_logs_a_change(client, token):
    response = post(client, token, event(md5=MD5.upper(), sha256=SHA256.upper(), id="e1"))

    assert response.status_code == 200, response.json()
    assert response.json() == counts(accepted=1, created=1)
    resource = Resource.objects.get()
    assert resource.uri == PREFIX + "a.txt"
    assert (resource.md5, resource.sha256) == (MD5, SHA256)
    assert resource.lastmod == datetime(2024, 5, 1, 10, tzinfo=UTC)
    change = Change.objects.get()
    assert (change.change, change.uri, change.event_id) == ("created", resource.uri, "e1")


def test_array_applies_created_updated_deleted(client, token, resource_set):
    ResourceFactory(resource_set=resource_set, location_value="old.txt", uri=PREFIX + "old.txt")

    response = post(
        client,
        token,
        [
            event("created", "new.txt"),
            event("updated", "new.txt", length=99),
            event("deleted", "old.txt", length=None, md5=None, mime=None, lastmod=None),
        ],
    )

    assert response.status_code == 200, response.json()
    assert response.json() == counts(accepted=3, created=1, updated=1, deleted=1)
    assert list(Resource.objects.values_list("uri", "length")) == [(PREFIX + "new.txt", 99)]
    assert list(Change.objects.order_by("id").values_list("change", flat=True)) == [
        "created",
        "updated",
        "deleted",
    ]


def test_created_for_an_existing_location_is_an_update(client, token, resource_set):
    ResourceFactory(resource_set=resource_set, location_value="a.txt", uri=PREFIX + "a.txt")

    response = post(client, token, event("created", "a.txt", length=7))

    assert response.json() == counts(accepted=1, updated=1)
    assert Resource.objects.get().length == 7
    assert Change.objects.get().change == "updated"


def test_updated_for_an_unknown_location_is_a_create(client, token):
    response = post(client, token, event("updated", "a.txt"))

    assert response.json() == counts(accepted=1, created=1)
    assert Resource.objects.count() == 1
    assert Change.objects.get().change == "created"


def test_deleted_for_an_unknown_location_is_accepted_and_logged(client, token):
    response = post(
        client, token, {"change": "deleted", "location": {"type": "rel_path", "value": "x"}}
    )

    assert response.json() == counts(accepted=1, deleted=1)
    assert not Resource.objects.exists()
    change = Change.objects.get()
    assert (change.change, change.uri, change.resource_key) == ("deleted", PREFIX + "x", None)


def test_events_apply_in_request_order(client, token):
    response = post(
        client,
        token,
        [event("created", "a.txt"), event("deleted", "a.txt"), event("created", "a.txt", length=5)],
    )

    assert response.json() == counts(accepted=3, created=2, deleted=1)
    assert Resource.objects.get().length == 5
    assert list(Change.objects.order_by("id").values_list("change", flat=True)) == [
        "created",
        "deleted",
        "created",
    ]


def test_retried_event_ids_are_duplicates_not_applied_twice(client, token):
    body = [event("created", "a.txt", id="e1"), event("created", "b.txt", id="e2")]
    assert post(client, token, body).json() == counts(accepted=2, created=2)

    retry = post(client, token, [*body, event("created", "c.txt", id="e3")])

    assert retry.json() == counts(accepted=1, created=1, duplicates=2)
    assert Change.objects.count() == 3


def test_repeated_id_within_one_request_is_a_duplicate(client, token):
    response = post(
        client, token, [event("created", "a.txt", id="e1"), event("updated", "a.txt", id="e1")]
    )

    assert response.json() == counts(accepted=1, created=1, duplicates=1)


def test_ndjson_body_is_read_line_by_line(client, token):
    body = ndjson(event("created", "a.txt"), event("created", "b.txt")) + "\n  \n"
    body += json.dumps(event("created", "c.txt"))  # no final newline

    response = post(client, token, body, content_type="application/x-ndjson")

    assert response.status_code == 200, response.json()
    assert response.json() == counts(accepted=3, created=3)


def test_ndjson_integers_beyond_64_bits_stay_integers(client, token):
    # A fast JSON reader turns such literals into floats: the length would be
    # called "not an integer" and the id refused instead of kept as its digits.
    body = ndjson(event(length=2**64), event("created", "b.txt", id=10**24))

    response = post(client, token, body, content_type="application/x-ndjson")

    assert response.json()["errors"] == [
        {"index": 0, "field": "length", "message": f"must be at most {2**63 - 1}."}
    ]
    response = post(client, token, ndjson(event(id=10**24)), content_type="application/x-ndjson")
    assert response.status_code == 200, response.json()
    assert Change.objects.get().event_id == str(10**24)


@pytest.mark.parametrize(
    "line",
    [
        b'{"length": 123456789012345678901234, "id": -98765432109876543210}',
        b'{"length": 1.5e3, "id": 1E2, "x": -0, "y": [1e400, -1e-400]}',
        b'{"length": NaN, "id": Infinity}',
        b'{"a": "\\ud800", "b": "\\udc00\\ud83d\\ude00"}',
        b'{"a": 1, "a": 2}',
        b'\xef\xbb\xbf{"a": 1}',
        b'{"a": "x\x7fy\xc2\x85"}  \r',
        b'{"a": "tab\tinside"}',
        b'{"a": [1,]}',
        b'["' + b"[" * 2000 + b'"]',
        b"[" * 1100 + b"]" * 1100,
    ],
)
def test_ndjson_lines_read_as_the_json_module_reads_them(line):
    # On line 2: a byte order mark that starts the body is skipped (tested below).
    (item,) = iter_ndjson(iter([b"\n" + line]))

    assert repr(item) == repr(parsers._json_decode(line, 2))


def test_links_are_resolved_and_stored(client, token):
    links = [
        {
            "rel": "describedby",
            "href": {"type": "rel_path", "value": "meta/a.xml"},
            "mime": "application/xml",
        },
        {"rel": "duplicate", "href": {"type": "url", "value": "https://mirror.example.org/a.txt"}},
    ]

    response = post(client, token, event(ln=links))

    assert response.status_code == 200, response.json()
    stored = Resource.objects.get().ln
    assert [link["uri"] for link in stored] == [
        PREFIX + "meta/a.xml",
        "https://mirror.example.org/a.txt",
    ]
    assert stored[0] == {
        "rel": "describedby",
        "href": {"type": "rel_path", "value": "meta/a.xml"},
        "mime": "application/xml",
        "uri": PREFIX + "meta/a.xml",
    }


def test_abs_path_inside_the_root_is_published_under_the_prefix(client, token):
    response = post(
        client, token, event(location={"type": "abs_path", "value": "/srv/data/x/y.txt"})
    )

    assert response.status_code == 200, response.json()
    assert Resource.objects.get().uri == PREFIX + "x/y.txt"


def test_datetime_is_kept_and_defaults_to_receipt(client, token):
    before = timezone.now()
    post(
        client,
        token,
        [
            event("created", "a.txt", datetime="2024-05-02T08:00:00+02:00"),
            event("created", "b.txt"),
        ],
    )

    dated, received = Change.objects.order_by("id")
    assert dated.datetime == datetime(2024, 5, 2, 6, tzinfo=UTC)
    assert before <= received.datetime <= timezone.now()


def test_a_null_datetime_is_refused_not_read_as_receipt(client, token):
    """The schema has `datetime` a string that may be left out: a null is no instant, and
    dating it silently at receipt would hide the sender's bug in the published lists."""
    response = post(client, token, [event("created", "a.txt"), {**event(), "datetime": None}])

    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert (error["index"], error["field"]) == (1, "datetime")
    assert "not null" in error["message"]
    assert "leave it out" in error["message"]
    assert not Change.objects.exists()


def test_empty_array_is_accepted(client, token):
    response = post(client, token, [])

    assert response.status_code == 200
    assert response.json() == counts()


def test_json_with_utf8_charset_is_accepted(client, token):
    response = post(client, token, event(), content_type="application/json; charset=utf-8")

    assert response.status_code == 200, response.json()


# --- Refused events: 400, field named, nothing applied ------------------------------------

BAD_EVENTS = [
    pytest.param({"change": "moved"}, "change", "must be one of", id="unknown-change"),
    pytest.param({"change": None}, "change", "required", id="missing-change"),
    pytest.param({"md5": "xyz"}, "md5", "32 hexadecimal", id="md5-short"),
    pytest.param({"md5": "g" * 32}, "md5", "32 hexadecimal", id="md5-not-hex"),
    pytest.param({"md5": None}, "md5", "required for a created", id="md5-missing"),
    pytest.param({"sha256": "a" * 63}, "sha256", "64 hexadecimal", id="sha256-short"),
    pytest.param({"sha256": "z" * 64}, "sha256", "64 hexadecimal", id="sha256-not-hex"),
    pytest.param({"length": -1}, "length", "negative", id="length-negative"),
    pytest.param({"length": "12"}, "length", "integer", id="length-string"),
    pytest.param({"length": 1.5}, "length", "integer", id="length-float"),
    pytest.param({"length": True}, "length", "integer", id="length-boolean"),
    pytest.param({"mime": None}, "mime", "required", id="mime-missing"),
    pytest.param({"mime": "plain text"}, "mime", "media type", id="mime-malformed"),
    pytest.param({"lastmod": "yesterday"}, "lastmod", "ISO 8601", id="lastmod-unparsable"),
    pytest.param({"lastmod": "2024-05-01T10:00:00"}, "lastmod", "time zone", id="lastmod-no-tz"),
    pytest.param({"datetime": "2024-13-01T10:00:00Z"}, "datetime", "ISO 8601", id="datetime-bad"),
    pytest.param({"datetime": "2024-05-01 10:00"}, "datetime", "time zone", id="datetime-no-tz"),
    pytest.param(
        {"location": {"type": "path", "value": "a"}},
        "location.type",
        "must be one of",
        id="location-type",
    ),
    pytest.param(
        {"location": {"type": "url"}}, "location.value", "required", id="location-value-missing"
    ),
    pytest.param({"location": "a.txt"}, "location", "object", id="location-not-object"),
    pytest.param(
        {"location": {"type": "abs_path", "value": "/etc/passwd"}},
        "location.value",
        "outside the resource root",
        id="abs-path-outside-root",
    ),
    pytest.param(
        {"location": {"type": "rel_path", "value": "../b.txt"}},
        "location.value",
        "'..'",
        id="rel-path-dot-dot",
    ),
    pytest.param(
        {"location": {"type": "rel_path", "value": "a/%2e%2e/%2e%2e/b"}},
        "location.value",
        "'..'",
        id="rel-path-encoded",
    ),
    pytest.param(
        {"location": {"type": "rel_path", "value": "a/%252e%252e/b"}},
        "location.value",
        "'..'",
        id="rel-path-double-encoded",
    ),
    pytest.param(
        {"location": {"type": "url", "value": "ftp://example.org/a"}},
        "location.value",
        "http or https",
        id="url-scheme",
    ),
    pytest.param(
        {"ln": [{"rel": "describedby", "href": {"type": "file", "value": "x"}}]},
        "ln.0.href.type",
        "must be one of",
        id="link-href-type",
    ),
    pytest.param(
        {"ln": [{"rel": "describedby", "href": {"type": "rel_path", "value": "../x"}}]},
        "ln.0.href.value",
        "'..'",
        id="link-href-value",
    ),
    pytest.param(
        {"ln": [{"href": {"type": "rel_path", "value": "x"}}]},
        "ln.0.rel",
        "required",
        id="link-rel",
    ),
    pytest.param({"ln": {"rel": "x"}}, "ln", "array", id="ln-not-array"),
    pytest.param({"id": ""}, "id", "1 to 200", id="id-empty"),
    pytest.param({"sha-256": SHA256}, "sha-256", "not a known field", id="unknown-field"),
    # A field named "" is named by the object that holds it: "" alone tells the sender nothing.
    pytest.param({"": 1}, "body", 'a field named "" (empty)', id="empty-field-name"),
    pytest.param(
        {"location": {"type": "rel_path", "value": "a.txt", "": "b"}},
        "location",
        'a field named "" (empty)',
        id="empty-location-field-name",
    ),
    pytest.param(
        {"ln": [{"rel": "describedby", "href": {"type": "rel_path", "value": "x"}, "": 1}]},
        "ln.0",
        'a field named "" (empty)',
        id="empty-link-field-name",
    ),
    pytest.param(
        {"ln": [{"rel": "describedby", "href": {"type": "rel_path", "value": "x", "": 1}}]},
        "ln.0.href",
        'a field named "" (empty)',
        id="empty-href-field-name",
    ),
]


@pytest.mark.parametrize(("changes", "field", "message"), BAD_EVENTS)
def test_invalid_event_is_refused_and_nothing_is_applied(client, token, changes, field, message):
    bad = {
        key: value
        for key, value in {**event("created", "bad.txt"), **changes}.items()
        if value is not None
    }

    response = post(client, token, [event("created", "good.txt"), bad])

    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert (error["index"], error["field"]) == (1, field)
    assert message in error["message"]
    assert not Resource.objects.exists()
    assert not Change.objects.exists()


def test_invalid_ndjson_event_is_refused_too(client, token):
    body = ndjson(event("created", "a.txt"), event("created", "b.txt", md5="nope"))

    response = post(client, token, body, content_type="application/x-ndjson")

    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"index": 1, "field": "md5", "message": "must be 32 hexadecimal digits."}
    ]
    assert not Change.objects.exists()


def test_every_invalid_event_is_reported(client, token):
    response = post(client, token, [event(length=-1), event(), event(md5="x"), {"change": "moved"}])

    assert [(error["index"], error["field"]) for error in response.json()["errors"]] == [
        (0, "length"),
        (2, "md5"),
        (3, "change"),
    ]


def test_state_before_a_refused_request_is_unchanged(client, token, resource_set):
    resource = ResourceFactory(
        resource_set=resource_set, location_value="a.txt", uri=PREFIX + "a.txt"
    )

    response = post(client, token, [event("deleted", "a.txt"), event(change="moved")])

    assert response.status_code == 400
    assert Resource.objects.get().pk == resource.pk
    assert not Change.objects.exists()


def test_datetime_before_the_open_change_list_is_refused(client, token, resource_set):
    ResourceSet.objects.filter(pk=resource_set.pk).update(
        accepts_changes_since=datetime(2024, 6, 1, tzinfo=UTC)
    )

    response = post(
        client,
        token,
        [
            event("created", "a.txt", datetime="2024-06-01T00:00:00Z"),
            event("created", "b.txt", datetime="2024-05-31T23:59:59Z"),
        ],
    )

    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert (error["index"], error["field"]) == (1, "datetime")
    assert "closed change lists" in error["message"]
    assert not Change.objects.exists()


def test_deleted_event_needs_no_content_fields(client, token):
    response = post(
        client,
        token,
        {"change": "deleted", "location": {"type": "rel_path", "value": "a.txt"}, "md5": MD5},
    )

    assert response.status_code == 200


# --- Malformed bodies -----------------------------------------------------------------


def test_malformed_json_names_line_and_column(client, token):
    body = "[\n  " + json.dumps(event()) + ',\n  {"change": "created",}\n]'

    response = post(client, token, body)

    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["field"] == "body"
    assert error["index"] == 1
    assert error["message"].startswith("line 3 column 24: ")


def test_malformed_ndjson_names_the_line(client, token):
    body = ndjson(event("created", "a.txt"), event("created", "b.txt")) + '{"change": \n'

    response = post(client, token, body, content_type="application/x-ndjson")

    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert (error["index"], error["field"]) == (2, "body")
    assert error["message"].startswith("line 3: ")
    assert not Change.objects.exists()


def test_ndjson_line_that_is_not_an_object(client, token):
    response = post(client, token, '[{"change": "created"}]\n', content_type="application/x-ndjson")

    assert response.json()["errors"] == [
        {"index": 0, "field": "body", "message": "an event must be a JSON object, not an array."}
    ]


def test_json_that_is_neither_object_nor_array(client, token):
    response = post(client, token, '"created"')

    (error,) = response.json()["errors"]
    assert error["field"] == "body"
    assert "event object or an array" in error["message"]


def test_trailing_data_after_the_array(client, token):
    response = post(client, token, json.dumps([event()]) + " []")

    assert response.status_code == 400
    assert "unexpected data" in response.json()["errors"][0]["message"]
    assert not Change.objects.exists()


def test_empty_body_is_refused(client, token):
    response = post(client, token, "")

    assert response.status_code == 400
    assert response.json()["errors"] == [{"index": None, "field": "body", "message": "is empty."}]


def test_body_that_is_not_utf8(client, token):
    response = post(client, token, '[{"change": "cr\xe9ated"}]'.encode("latin-1"))

    assert response.status_code == 400
    assert "UTF-8" in response.json()["errors"][0]["message"]


# --- Size and content type ----------------------------------------------------------------


@override_settings(INGEST_MAX_BODY_BYTES=200)
@pytest.mark.parametrize("content_type", ["application/json", "application/x-ndjson"])
def test_body_over_the_size_limit_is_413(client, token, content_type):
    body = ndjson(event("created", "a.txt"), event("created", "b.txt"))
    if content_type == "application/json":
        body = json.dumps([event("created", "a.txt"), event("created", "b.txt")])
    assert len(body) > 200

    response = post(client, token, body, content_type=content_type)

    assert response.status_code == 413
    (error,) = response.json()["errors"]
    assert (error["index"], error["field"]) == (None, "body")
    assert error["message"].startswith("is larger than the limit of 200 bytes")
    assert not Change.objects.exists()


@override_settings(INGEST_BATCH_SIZE=1)
def test_limit_reached_mid_stream_rolls_back_what_was_applied(client, token, monkeypatch):
    """Content-Length passed, but the bytes counted while streaming go over the limit."""
    read = parsers.read_chunks
    monkeypatch.setattr(parsers, "CHUNK_BYTES", 100)
    monkeypatch.setattr(parsers, "read_chunks", lambda stream, limit: read(stream, limit=1000))
    body = ndjson(*(event("created", f"{n}.txt") for n in range(20)))

    response = post(client, token, body, content_type="application/x-ndjson")

    assert response.status_code == 413
    assert not Change.objects.exists()
    assert not Resource.objects.exists()


def test_size_limit_is_enforced_while_streaming_whatever_content_length_says():
    stream = io.BytesIO(b"x" * 300_000)

    with pytest.raises(BodyTooLarge):
        for _ in read_chunks(stream, limit=200_000):
            pass


@override_settings(INGEST_MAX_BODY_BYTES=100)
def test_parser_counts_bytes_of_a_body_without_content_length():
    body = io.BytesIO(json.dumps([event("created", f"{n}.txt") for n in range(5)]).encode())
    request = type("Request", (), {"META": {}})()

    # The body is received whole (spooled) and checked before any event is applied.
    with pytest.raises(BodyTooLarge):
        JSONEventsParser().parse(body, "application/json", {"request": request})


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/xml", "application/json; charset=utf-16"]
)
def test_other_content_types_are_415(client, token, content_type):
    response = post(client, token, json.dumps(event()), content_type=content_type)

    assert response.status_code == 415
    assert "detail" in response.json()
    assert "Accept-Encoding" not in response  # the media type is refused, not the coding
    assert not Change.objects.exists()


@pytest.mark.parametrize("encoding", ["gzip", "br", "GZIP, identity"])
def test_a_compressed_body_is_415_naming_the_content_encoding(client, token, encoding):
    # The body was read as it came: a gzip body answered 400 "is not UTF-8", which says
    # nothing of the cause (found by the input probe).
    response = client.post(
        reverse("api:events", args=("acme", "reports")),
        data=gzip.compress(json.dumps(event()).encode()),
        content_type="application/json",
        headers={"Authorization": f"Token {token.plain_key}", "Content-Encoding": encoding},
    )

    assert response.status_code == 415
    assert "Content-Encoding" in response.json()["detail"]
    # RFC 7694, section 3: the answer says which codings the client may send.
    assert response["Accept-Encoding"] == "identity"
    assert not Change.objects.exists()


def test_an_identity_content_encoding_is_read(client, token):
    response = client.post(
        reverse("api:events", args=("acme", "reports")),
        data=json.dumps(event()),
        content_type="application/json",
        headers={"Authorization": f"Token {token.plain_key}", "Content-Encoding": "identity"},
    )

    assert response.status_code == 200


def test_unknown_set_is_404(client, token):
    response = post(client, token, event(), path=("acme", "no-such-set"))

    assert response.status_code == 404


# --- The streaming readers ----------------------------------------------------------------


def chunked(data: bytes, size: int) -> list[bytes]:
    return [data[start : start + size] for start in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 100_000])
def test_json_array_reader_is_independent_of_chunk_boundaries(size):
    document = [
        event(
            "created",
            "ä/é.txt",
            length=12345678901234,
            ln=[{"rel": "x", "href": {"type": "url", "value": "https://e.org/[1]"}}],
        ),
        {"nested": [1, [2, {"a": "}]"}]], "n": -1.5e10},
        123456789,
        'text with \\"quotes\\"',
    ]
    data = (" \n" + json.dumps(document, ensure_ascii=False, indent=2) + "\n").encode()

    assert list(iter_json(iter(chunked(data, size)))) == document


@pytest.mark.parametrize("size", [1, 5, 100_000])
def test_json_reader_reads_one_object(size):
    data = json.dumps(event()).encode()

    assert list(iter_json(iter(chunked(data, size)))) == [event()]


def test_json_reader_reports_where_the_syntax_error_is():
    data = b'[{"a": 1},\n {"b": 2}\n {"c": 3}]'

    items = list(iter_json(iter(chunked(data, 4))))

    assert items[:2] == [{"a": 1}, {"b": 2}]
    assert items[2] == MalformedEvent("line 3 column 2: expected ',' or ']'.")


def test_json_reader_reports_a_truncated_body():
    items = list(iter_json(iter([b'[{"a": 1}, {"b": '])))

    assert items[0] == {"a": 1}
    assert isinstance(items[1], MalformedEvent)
    assert items[1].message.startswith("line 1 column 18: Expecting value")


@pytest.mark.parametrize("size", [1, 2, 3, 4, 100_000])
def test_both_readers_skip_a_byte_order_mark_at_the_start(size):
    """A JSON body may start with one, and so may NDJSON: a 400 on line 1 before."""
    lines = [event("created", f"{n}.txt") for n in range(2)]
    bom = "\ufeff".encode()

    assert list(iter_ndjson(iter(chunked(bom + ndjson(*lines).encode(), size)))) == lines
    assert list(iter_json(iter(chunked(bom + json.dumps(lines).encode(), size)))) == lines


@pytest.mark.parametrize("size", [1, 3, 100_000])
def test_ndjson_reader_is_independent_of_chunk_boundaries(size):
    lines = [event("created", f"{n}.txt") for n in range(5)]
    data = ndjson(*lines).encode()

    assert list(iter_ndjson(iter(chunked(data, size)))) == lines


def test_ndjson_reader_stops_at_an_overlong_line(monkeypatch):
    monkeypatch.setattr("sources.api.parsers.MAX_EVENT_BYTES", 10)

    items = list(iter_ndjson(iter([b'{"a": 1}\n', b"x" * 30, b"\n{}"])))

    assert items[0] == {"a": 1}
    assert items[1] == MalformedEvent(
        "line 2: is longer than 10 bytes; the rest of the body was not read."
    )
    assert len(items) == 2


def test_schema_serializers_describe_the_fields_the_validator_accepts():
    assert set(EventSerializer().fields) == EVENT_FIELDS
    assert set(LocationSerializer().fields) == LOCATION_FIELDS
    assert {
        name for name, field in LinkSerializer().fields.items() if not field.read_only
    } == LINK_FIELDS


def _down(cause: Exception) -> Exception:
    from django.db import OperationalError

    error = OperationalError(str(cause))
    error.__cause__ = cause
    return error


def _sqlite_full() -> Exception:
    import sqlite3

    cause = sqlite3.OperationalError("database or disk is full")
    cause.sqlite_errorname = "SQLITE_FULL"
    return cause


def _sqlite_wal_full() -> Exception:
    """What opening a connection raises when the disk has no room to grow the WAL's
    shared-memory file: an extended I/O error code, not the plain SQLITE_IOERR."""
    import sqlite3

    cause = sqlite3.OperationalError("disk I/O error")
    cause.sqlite_errorname = "SQLITE_IOERR_SHMSIZE"
    cause.sqlite_errorcode = 4874
    return cause


@pytest.mark.parametrize(
    "cause",
    [
        pytest.param(lambda: __import__("psycopg").OperationalError("connection refused"), id="pg"),
        pytest.param(_sqlite_full, id="sqlite-disk-full"),
        pytest.param(_sqlite_wal_full, id="sqlite-disk-full-extended-code"),
    ],
)
def test_a_database_that_is_down_or_full_is_a_503_to_retry(client, token, monkeypatch, cause):
    """PostgreSQL restarting answered Django's HTML 500: a sender could not tell it from a
    bug in its events. Nothing was applied, so it is the sender's to retry."""
    from sources.api import views

    def unavailable(**kwargs):
        raise _down(cause())

    monkeypatch.setattr(views, "ingest_events", unavailable)

    response = post(client, token, [event()])

    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert "nothing was applied" in response.json()["detail"]


def test_any_other_database_error_is_still_a_500(client, token, monkeypatch):
    """A bug (a missing table, a bad query) is not the sender's to retry."""
    import psycopg

    from sources.api import views

    def broken(**kwargs):
        raise _down(psycopg.errors.UndefinedTable("relation does not exist"))

    monkeypatch.setattr(views, "ingest_events", broken)
    client.raise_request_exception = False

    assert post(client, token, [event()]).status_code == 500


def test_one_resource_however_its_url_is_written(client, token):
    """A file posted by rel_path, then as a raw IRI, then with lower-case escapes, became
    three resources, the first with stale hashes; and the IRI was published as it came,
    non-ASCII in its <loc>, which resync could not fetch (it aborted the whole baseline)."""
    post(client, token, [event(value="café/naïve.txt")])
    forms = [f"{PREFIX}café/naïve.txt", f"{PREFIX}caf%c3%a9/na%c3%afve.txt"]
    forms += ["HTTPS://Data.Example.org/reports/caf%C3%A9/na%C3%AFve.txt"]
    for version, url in enumerate(forms, start=2):
        response = post(
            client,
            token,
            [event("updated", **{"location": {"type": "url", "value": url}}, length=version)],
        )
        assert response.status_code == 200, response.content
        assert response.json()["updated"] == 1, url

    (resource,) = Resource.objects.all()
    assert resource.uri == f"{PREFIX}caf%C3%A9/na%C3%AFve.txt"
    assert resource.length == 4
