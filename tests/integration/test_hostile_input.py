"""A hostile client can neither get a 5xx nor leave a set that no longer publishes.

Every case here was once accepted (200) and then broke the next regeneration
for good, or was a 500. Each is posted through the real API; the last test
posts all of them and checks that the next valid event is still published.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client, TestCase, override_settings
from django.urls import reverse
from django.utils import timezone
from lxml import etree

from sitemaps.models import ChangeListPage
from sitemaps.regeneration import regenerate
from sources.api import validation
from sources.models import ApiToken, CapabilitySettings, Change, ResourceSet
from tests.conftest import REPO, _database_url
from tests.factories import ApiTokenFactory

from ..support import NS, assert_valid, make_set, store_documents_in

MD5 = "9e107d9d372bb6826bd81d3542a419d6"
PREFIX = "http://data.example.org/acme/articles/"


@pytest.fixture
def resource_set(db) -> ResourceSet:
    resource_set = make_set()
    ResourceSet.objects.filter(pk=resource_set.pk).update(resource_root_dir="/srv/data")
    resource_set.refresh_from_db()
    return resource_set


@pytest.fixture
def token(resource_set: ResourceSet) -> ApiToken:
    return ApiTokenFactory(provider=resource_set.provider)


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def event(value: str = "a.txt", **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "change": "created",
        "location": {"type": "rel_path", "value": value},
        "length": 43,
        "md5": MD5,
        "mime": "text/plain",
        "lastmod": "2024-05-01T10:00:00Z",
    }
    data.update(fields)
    return data


def link(**fields: Any) -> dict[str, Any]:
    return {"rel": "describedby", "href": {"type": "rel_path", "value": "a.xml"}, **fields}


def post(client: Client, token: ApiToken, body: str | bytes, content_type: str) -> Any:
    return client.post(
        reverse("api:events", args=("acme", "articles")),
        data=body,
        content_type=content_type,
        headers={"Authorization": f"Token {token.plain_key}"},
    )


@dataclass(frozen=True)
class Hostile:
    """A body a hostile client might send, and the field its 400 must name."""

    body: str
    field: str
    content_type: str = "application/json"


class _Huge:
    """Stands for an integer literal of 5,000 digits in `as_json`."""


HUGE_NUMBER = _Huge()
HUGE = "9" * 5000  # over Python's 4,300-digit limit for int <-> str


def as_json(data: object) -> str:
    # ensure_ascii writes lone surrogates as \\udXXX escapes, as a client would.
    return json.dumps(data, default=lambda _: "HUGE").replace('"HUGE"', HUGE)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


IN_A_DAY = (timezone.now() + timedelta(days=1)).isoformat()

HOSTILE = {
    # Characters that XML 1.0 forbids, where the writer would refuse them.
    "url-fffe": Hostile(
        as_json(event(location={"type": "url", "value": "http://x.example.org/\ufffe"})),
        "location.value",
    ),
    "url-ffff": Hostile(
        as_json(event(location={"type": "url", "value": "http://x.example.org/a\uffff"})),
        "location.value",
    ),
    "url-lone-surrogate": Hostile(
        as_json(event(location={"type": "url", "value": "http://x.example.org/\ud800"})),
        "location.value",
    ),
    "rel-path-lone-surrogate": Hostile(as_json(event("a\udfff.txt")), "location.value"),
    "rel-path-fffe": Hostile(as_json(event("a\ufffe.txt")), "location.value"),
    "abs-path-ffff": Hostile(
        as_json(event(location={"type": "abs_path", "value": "/srv/data/\uffff"})),
        "location.value",
    ),
    "href-fffe": Hostile(
        as_json(event(ln=[link(href={"type": "url", "value": "http://x.example.org/\ufffe"})])),
        "ln.0.href.value",
    ),
    "mime-fffe": Hostile(as_json(event(mime="text/plain; charset=\ufffe")), "mime"),
    "mime-lone-surrogate": Hostile(as_json(event(mime="text/plain; q=\ud834")), "mime"),
    "link-mime-ffff": Hostile(as_json(event(ln=[link(mime="text/xml; a=\uffff")])), "ln.0.mime"),
    "rel-nul": Hostile(as_json(event(ln=[link(rel="describedby\x00")])), "ln.0.rel"),
    "rel-control": Hostile(as_json(event(ln=[link(rel="describ\x07edby")])), "ln.0.rel"),
    "rel-fffe": Hostile(as_json(event(ln=[link(rel="describedby\ufffe")])), "ln.0.rel"),
    "id-lone-surrogate": Hostile(as_json(event(id="e-\udc00")), "id"),
    "id-nul": Hostile(as_json(event(id="e-\x00")), "id"),
    "unknown-field-lone-surrogate": Hostile(as_json({**event(), "x\ud800": 1}), "x\\ud800"),
    # URIs the schemas refuse (xs:anyURI as libxml2 checks it; a <loc> of 12 characters or more).
    "url-shorter-than-a-loc": Hostile(
        as_json(event(location={"type": "url", "value": "http://a.b/"})), "location.value"
    ),
    "url-lone-percent": Hostile(
        as_json(event(location={"type": "url", "value": "http://x.example.org/50%"})),
        "location.value",
    ),
    "url-bracket-in-path": Hostile(
        as_json(event(location={"type": "url", "value": "http://x.example.org/a[1]"})),
        "location.value",
    ),
    "url-cdata-end": Hostile(
        as_json(event(location={"type": "url", "value": "http://x.example.org/]]>"})),
        "location.value",
    ),
    "url-two-hashes": Hostile(
        as_json(event(location={"type": "url", "value": "http://x.example.org/a#b#c"})),
        "location.value",
    ),
    "url-port-past-2-31": Hostile(
        as_json(event(location={"type": "url", "value": "http://x.example.org:9999999999/b"})),
        "location.value",
    ),
    "url-port-not-a-number": Hostile(
        as_json(event(location={"type": "url", "value": "http://x.example.org:a/b"})),
        "location.value",
    ),
    "href-bad-escape": Hostile(
        as_json(event(ln=[link(href={"type": "url", "value": "http://x.example.org/%zz"})])),
        "ln.0.href.value",
    ),
    "rel-lone-percent": Hostile(as_json(event(ln=[link(rel="50%off")])), "ln.0.rel"),
    "rel-brackets": Hostile(as_json(event(ln=[link(rel="[x]")])), "ln.0.rel"),
    # Past Lucene's 32,766-byte keyword term: Elasticsearch refused the change's document,
    # so it was never indexed and no page was built from the copy again.
    "rel-longer-than-a-uri": Hostile(
        as_json(event(ln=[link(rel="http://x.example.org/rel/" + "r" * 40_000)])), "ln.0.rel"
    ),
    # The same for a location's value, kept as posted: its empty segments resolve away, so
    # its URI fit, and the mirror refused the change's document for the value.
    "rel-path-of-slashes": Hostile(as_json(event("a" + "/" * 40_000 + "b.txt")), "location.value"),
    "href-of-slashes": Hostile(
        as_json(event(ln=[link(href={"type": "rel_path", "value": "a" + "/" * 40_000 + "b"})])),
        "ln.0.href.value",
    ),
    # Instants some database cannot hold.
    "lastmod-after-9999-in-utc": Hostile(
        as_json(event(lastmod="9999-12-31T23:59:59-01:00")), "lastmod"
    ),
    "lastmod-before-year-1-in-utc": Hostile(
        as_json(event(lastmod="0001-01-01T00:00:00+01:00")), "lastmod"
    ),
    "datetime-after-9999-in-utc": Hostile(
        as_json(event(datetime="9999-12-31T23:59:59-01:00")), "datetime"
    ),
    # Before the epoch, which the mirror's `date_nanos` cannot hold: a set with no Change
    # List yet took it, Elasticsearch refused the change, and no page was built again.
    "datetime-before-1970": Hostile(as_json(event(datetime="1969-12-31T23:59:59Z")), "datetime"),
    # A change in the future would close the open Change List there.
    "datetime-far-future": Hostile(as_json(event(datetime="8999-01-01T00:00:00Z")), "datetime"),
    "datetime-tomorrow": Hostile(as_json(event(datetime=IN_A_DAY)), "datetime"),
    # Numbers Python will not convert, nesting its parser will not follow.
    "length-5000-digits": Hostile(as_json(event(length=HUGE_NUMBER)), "length"),
    "id-5000-digits": Hostile(as_json(event(id=HUGE_NUMBER)), "id"),
    "length-5000-digits-ndjson": Hostile(
        as_json(event(length=HUGE_NUMBER)) + "\n", "length", "application/x-ndjson"
    ),
    "nested-5000-json": Hostile(f'{{"change": {nested(5000)}}}', "body"),
    "nested-5000-json-array": Hostile(f"[{nested(5000)}]", "body"),
    "nested-5000-ndjson": Hostile(
        as_json(event()) + "\n" + nested(5000) + "\n", "body", "application/x-ndjson"
    ),
}


@pytest.mark.parametrize("case", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_event_is_a_400_naming_the_field(client, token, case: Hostile):
    response = post(client, token, case.body, case.content_type)

    assert response.status_code == 400, response.content
    fields = [error["field"] for error in response.json()["errors"]]
    assert fields == [case.field]
    assert not Change.objects.exists()


def test_odd_uris_the_schemas_take_are_accepted_and_published_valid(client, token, resource_set):
    """Characters outside ASCII (encoded) and some outside URI syntax (libxml2 escapes them),
    brackets in an IPv6 host or a fragment, `%`-escapes, URI relations: the refusals
    above stop there."""
    odd = [
        "http://x.example.org/caf\u00e9/\u65e5\u672c",
        "http://[2001:db8::1]/x",
        "http://x.example.org/a%20b?q=1#frag[1]",
        "http://x.example.org/a{b}|c^d`e",
    ]
    events = [event(location={"type": "url", "value": uri}) for uri in odd]
    events[0]["ln"] = [link(rel="http://example.org/rel#x")]
    with TestCase.captureOnCommitCallbacks(execute=True):
        response = post(client, token, as_json(events), "application/json")
    assert response.status_code == 200, response.json()
    regenerate(resource_set)

    # An IRI is published as its URI (RFC 3987 3.1): sitemaps take URIs.
    published = {"http://x.example.org/caf%C3%A9/%E6%97%A5%E6%9C%AC", *odd[1:]}
    assert published <= set(resource_list_locs(client))
    assert published <= set(change_list_locs(client))
    for name in ("resourcelist.xml", "changelist.xml"):
        response = client.get(f"/resourcesync/acme/articles/{name}")
        assert_valid(b"".join(response.streaming_content))  # the official schemas


def test_the_ndjson_error_names_the_line(client, token):
    body = as_json(event()) + "\n" + nested(5000) + "\n"

    response = post(client, token, body, "application/x-ndjson")

    (error,) = response.json()["errors"]
    assert error["message"].startswith("line 2: ")


def test_the_latest_instants_every_database_holds_are_accepted(client, token):
    body = as_json(event(lastmod="9999-12-31T23:59:59+00:00", datetime="1970-01-01T00:00:00Z"))

    response = post(client, token, body, "application/json")

    assert response.status_code == 200, response.json()


@override_settings(INGEST_CLOCK_SKEW_SECONDS=300)
def test_a_datetime_a_little_ahead_of_the_server_clock_is_accepted(client, token):
    ahead = (timezone.now() + timedelta(seconds=60)).isoformat()

    response = post(client, token, as_json(event(datetime=ahead)), "application/json")

    assert response.status_code == 200, response.json()


@override_settings(INGEST_CLOCK_SKEW_SECONDS=300)
def test_a_datetime_beyond_the_clock_skew_names_the_limit(client, token):
    ahead = (timezone.now() + timedelta(seconds=400)).isoformat()

    response = post(client, token, as_json(event(datetime=ahead)), "application/json")

    (error,) = response.json()["errors"]
    assert error["field"] == "datetime"
    assert "300 seconds" in error["message"]


def post_events(client, token, *events) -> Any:
    with TestCase.captureOnCommitCallbacks(execute=True):
        return post(client, token, as_json(list(events)), "application/json")


def at(seconds: float) -> str:
    return (timezone.now() + timedelta(seconds=seconds)).isoformat()


def test_a_change_dated_before_its_locations_latest_is_refused(client, token, resource_set):
    """In one request: the Change List would list it first, and end with a state the
    snapshot has not. Across requests it is dated at its receipt, after the first, as the
    snapshot applied them. (No regeneration runs here: the open list starts an hour ago.)"""
    an_hour_ago = timezone.now() - timedelta(hours=1)
    ResourceSet.objects.filter(pk=resource_set.pk).update(accepts_changes_since=an_hour_ago)

    def post_events(*events) -> Any:
        return post(client, token, as_json(list(events)), "application/json")

    both = [event("b.txt", datetime=at(-60)), event("c.txt"), event("b.txt", datetime=at(-90))]
    response = post_events(*both)
    assert [(e["index"], e["field"]) for e in response.json()["errors"]] == [(2, "datetime")]
    assert "latest change" in response.json()["errors"][0]["message"]
    assert Change.objects.count() == 0

    assert post_events(event("a.txt", datetime=at(-60))).status_code == 200
    later = post_events(event("a.txt", change="deleted", datetime=at(-90)))
    assert later.status_code == 200, later.json()
    created, deleted = Change.objects.order_by("id")
    assert (created.change, deleted.change) == ("created", "deleted")
    assert deleted.datetime > created.datetime


def test_a_change_dated_before_the_sets_latest_is_dated_at_its_receipt(client, token, resource_set):
    """Listed before changes already published, a destination resuming from the newest
    datetime it applied (resync, and the portal's own harvester) would never read it."""
    an_hour_ago = timezone.now() - timedelta(hours=1)
    ResourceSet.objects.filter(pk=resource_set.pk).update(accepts_changes_since=an_hour_ago)
    first = post(client, token, as_json([event("a.txt", datetime=at(-60))]), "application/json")
    assert first.status_code == 200

    response = post(client, token, as_json([event("b.txt", datetime=at(-90))]), "application/json")

    assert response.status_code == 200, response.json()
    a, b = Change.objects.order_by("id")
    assert b.datetime > a.datetime and b.datetime > timezone.now() - timedelta(seconds=30)


def test_an_undated_change_is_dated_no_earlier_than_its_locations_latest(
    client, token, resource_set
):
    """A change dated ahead of the server's clock (kept from before such changes were
    dated at receipt, or the clock stepped back since), then an undated one: the second is
    dated with the first's datetime, so the lists end with it, as the snapshot does."""
    assert post_events(client, token, event("a.txt")).status_code == 200
    Change.objects.update(datetime=timezone.now() + timedelta(seconds=240))
    deleted = {"change": "deleted", "location": {"type": "rel_path", "value": "a.txt"}}
    response = post_events(client, token, deleted)
    assert response.status_code == 200, response.json()
    regenerate(resource_set)

    created, removed = Change.objects.order_by("datetime", "id")
    assert (created.change, removed.change) == ("created", "deleted")
    assert removed.datetime == created.datetime
    assert PREFIX + "a.txt" not in resource_list_locs(client)
    assert change_list_locs(client) == [PREFIX + "a.txt", PREFIX + "a.txt"]


@override_settings(INGEST_CLOCK_SKEW_SECONDS=300)
def test_a_change_dated_ahead_is_recorded_at_its_receipt(client, token, resource_set):
    """The clock skew lets a sender's clock run ahead, not a change happen in the future.
    Kept as sent, such a change closed a full list minutes ahead: changes dated now were
    refused until then, and undated ones were dated then."""
    CapabilitySettings.objects.filter(resource_set=resource_set).update(entries_per_document=3)
    ahead = [event(f"{n}.txt", datetime=at(240 + n)) for n in range(4)]
    assert post_events(client, token, event("a.txt"), *ahead).status_code == 200
    regenerate(resource_set)

    now = timezone.now()
    assert max(Change.objects.values_list("datetime", flat=True)) <= now
    closed = ChangeListPage.objects.filter(resource_set=resource_set, until__isnull=False)
    assert closed.exists() and max(closed.values_list("until", flat=True)) <= now
    response = post_events(client, token, event("b.txt", datetime=at(0)))
    assert response.status_code == 200, response.json()
    undated = post_events(client, token, event("c.txt"))
    assert undated.status_code == 200 and Change.objects.latest("id").datetime <= timezone.now()


@override_settings(INGEST_CLOCK_SKEW_SECONDS=300)
def test_changes_dated_ahead_are_dated_as_undated_ones(client, token, resource_set):
    """One microsecond apart in request order, after the location's undated change just
    before: not all at one instant, and not refused as out of order."""
    events = [event("b.txt"), event("a.txt"), event("a.txt", datetime=at(10))]
    events += [event(f"{n}.txt", datetime=at(100 + n)) for n in range(3)]

    response = post_events(client, token, *events)

    assert response.status_code == 200, response.json()
    moments = list(Change.objects.order_by("id").values_list("datetime", flat=True))
    assert moments == sorted(moments) and len(set(moments)) == 6


def test_a_change_dated_ahead_goes_into_an_open_list_that_starts_ahead(client, token, resource_set):
    """A list closed a little in the future (as lists did before changes dated ahead were
    dated at receipt): a change dated between the clock and that start is dated at it."""
    opens = timezone.now() + timedelta(seconds=120)
    ResourceSet.objects.filter(pk=resource_set.pk).update(accepts_changes_since=opens)

    response = post(client, token, as_json(event(datetime=at(60))), "application/json")

    assert response.status_code == 200, response.json()
    assert Change.objects.get().datetime >= opens


@override_settings(INGEST_CLOCK_SKEW_SECONDS=300)
def test_other_locations_may_be_dated_in_any_order(client, token):
    first = event("a.txt", datetime=at(60))
    assert post_events(client, token, first).status_code == 200

    response = post_events(client, token, event("b.txt", datetime=at(30)), event("c.txt"))

    assert response.status_code == 200, response.json()


def test_a_datetime_before_the_first_change_list_is_refused(client, token, resource_set):
    """The first list starts when regeneration first runs; nothing may land before it."""
    assert post(client, token, as_json(event()), "application/json").status_code == 200
    regenerate(resource_set)
    start = ChangeListPage.objects.get(resource_set=resource_set).since
    before = (start - timedelta(seconds=1)).isoformat()

    response = post(client, token, as_json(event("b.txt", datetime=before)), "application/json")

    assert response.status_code == 400, response.json()
    (error,) = response.json()["errors"]
    assert error["field"] == "datetime"
    assert Change.objects.count() == 1


def test_an_old_event_before_any_change_list_still_appears_in_one(client, token, resource_set):
    old = "2001-01-01T00:00:00Z"

    response = post(client, token, as_json(event(datetime=old)), "application/json")

    assert response.status_code == 200, response.json()
    regenerate(resource_set)
    assert PREFIX + "a.txt" in change_list_locs(client)


def test_the_receipt_time_never_falls_inside_a_closed_list(client, token, resource_set):
    """A list closed a little in the future (as lists did, at a change dated within the
    clock skew, before such changes were dated at receipt)."""
    opens = timezone.now() + timedelta(seconds=120)
    ResourceSet.objects.filter(pk=resource_set.pk).update(accepts_changes_since=opens)

    response = post(client, token, as_json(event()), "application/json")

    assert response.status_code == 200, response.json()
    assert Change.objects.get().datetime >= opens


# --- Bodies: chunked, too large, and the write lock -------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def gunicorn(file_database, tmp_path) -> Iterator[str]:
    """The portal under gunicorn, as deployed, on the test database; yields host:port."""
    port = _free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"ELASTICSEARCH_URL", "CELERY_BROKER_URL"}
    }
    env.update(
        DJANGO_SETTINGS_MODULE="resourcesync_portal.test_settings",
        DATABASE_URL=_database_url(connection.settings_dict),
        DATA_DIR=str(tmp_path),
        INGEST_MAX_BODY_BYTES="20000",
    )
    log = (tmp_path / "gunicorn.log").open("wb")
    command = [sys.executable, "-m", "gunicorn", "resourcesync_portal.wsgi", "-w", "1",
               "-b", f"127.0.0.1:{port}"]  # fmt: skip
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail((tmp_path / "gunicorn.log").read_text())
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def post_chunked(address: str, token: ApiToken, chunks: list[bytes]) -> tuple[int, Any]:
    """POST with Transfer-Encoding: chunked and no Content-Length, as http.client sends it."""
    host, port = address.split(":")
    client = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        client.request(
            "POST",
            reverse("api:events", args=("acme", "articles")),
            body=iter(chunks),
            headers={
                "Content-Type": "application/x-ndjson",
                "Authorization": f"Token {token.plain_key}",
            },
            encode_chunked=True,
        )
        response = client.getresponse()
        return response.status, json.loads(response.read())
    finally:
        client.close()


def test_a_chunked_body_is_read(gunicorn, token):
    lines = [as_json(event(f"{n}.txt")).encode() + b"\n" for n in range(3)]

    status, body = post_chunked(gunicorn, token, [lines[0], lines[1][:20], lines[1][20:], lines[2]])

    assert status == 200, body
    assert body["created"] == 3
    assert Change.objects.count() == 3


def test_a_chunked_body_is_limited_while_it_streams(gunicorn, token):
    line = as_json(event()).encode() + b"\n"

    status, body = post_chunked(gunicorn, token, [line] * (20000 // len(line) + 1))

    assert status == 413, body
    assert "20000 bytes" in body["errors"][0]["message"]
    assert not Change.objects.exists()


def test_a_server_that_cannot_read_chunked_bodies_says_411(file_database, live_server):
    """Django's own server passes the chunks through undecoded: never guess."""
    make_set()
    token = ApiTokenFactory(provider=ResourceSet.objects.get().provider)

    status, body = post_chunked(live_server.url.removeprefix("http://"), token, [b"{}\n"])

    assert status == 411, body
    assert "Content-Length" in body["errors"][0]["message"]


@override_settings(INGEST_MAX_BODY_BYTES=1000)
def test_the_413_says_how_to_send_more(client, token):
    body = "\n".join(as_json(event(f"{n}.txt")) for n in range(20))

    response = post(client, token, body, "application/x-ndjson")

    assert response.status_code == 413
    message = response.json()["errors"][0]["message"]
    assert "1000 bytes" in message
    assert "several requests" in message


def test_a_long_parse_does_not_hold_the_write_lock(file_database, live_server, monkeypatch):
    """While one provider's body is validated, another provider's request gets through."""
    first, second = make_set("acme", "articles"), make_set("other", "things")
    first_token = ApiTokenFactory(provider=first.provider)
    second_token = ApiTokenFactory(provider=second.provider)
    validating, released = threading.Event(), threading.Event()
    original = validation.EventValidator.validate

    def slow_validate(self, data, *, index):
        if isinstance(data, dict) and data.get("id") == "slow":
            validating.set()
            released.wait(timeout=30)
        return original(self, data, index=index)

    monkeypatch.setattr(validation.EventValidator, "validate", slow_validate)
    results: dict[str, int] = {}

    def post_slow() -> None:
        response = live_post(live_server.url, first_token, "acme/articles", event(id="slow"))
        results["slow"] = response.status

    thread = threading.Thread(target=post_slow)
    thread.start()
    try:
        assert validating.wait(timeout=30)
        started = time.monotonic()
        response = live_post(live_server.url, second_token, "other/things", event())
        results["other"], seconds = response.status, time.monotonic() - started
    finally:
        released.set()
        thread.join(timeout=60)
    assert results == {"slow": 200, "other": 200}
    assert seconds < 3


def live_post(base: str, token: ApiToken, path: str, data: object) -> http.client.HTTPResponse:
    host, port = base.removeprefix("http://").split(":")
    client = http.client.HTTPConnection(host, int(port), timeout=60)
    client.request(
        "POST",
        f"/api/v1/sets/{path}/events",
        body=json.dumps(data),
        headers={"Content-Type": "application/json", "Authorization": f"Token {token.plain_key}"},
    )
    response = client.getresponse()
    response.read()
    client.close()
    return response


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's database-wide write lock")
def test_the_last_used_update_never_fails_a_request(file_database, live_server):
    """Another writer holds SQLite's lock longer than its timeout: reads still answer."""
    resource_set = make_set()
    token = ApiTokenFactory(provider=resource_set.provider)

    holder = sqlite3.connect(connection.settings_dict["NAME"], timeout=0)
    try:
        holder.execute("BEGIN IMMEDIATE")
        host, port = live_server.url.removeprefix("http://").split(":")
        client = http.client.HTTPConnection(host, int(port), timeout=60)
        headers = {"Authorization": f"Token {token.plain_key}"}
        client.request("GET", "/api/v1/sets/", headers=headers)
        response = client.getresponse()
        status = response.status
        client.close()
    finally:
        holder.rollback()
        holder.close()
    assert status == 200


# --- After all of it, the set still publishes -------------------------------------------


def change_list_locs(client: Client) -> list[str]:
    index = client.get("/resourcesync/acme/articles/changelist.xml")
    assert index.status_code == 200
    root = etree.fromstring(b"".join(index.streaming_content))
    if root.tag.endswith("urlset"):  # the set's only Change List
        return root.xpath("//sm:loc/text()", namespaces=NS)
    locs: list[str] = []
    for url in root.xpath("//sm:loc/text()", namespaces=NS):
        page = client.get(url.removeprefix("http://127.0.0.1:8000"))
        content = b"".join(page.streaming_content)
        locs += etree.fromstring(content).xpath("//sm:loc/text()", namespaces=NS)
    return locs


def resource_list_locs(client: Client) -> list[str]:
    response = client.get("/resourcesync/acme/articles/resourcelist.xml")
    assert response.status_code == 200
    content = b"".join(response.streaming_content)
    return etree.fromstring(content).xpath("//sm:loc/text()", namespaces=NS)


def test_after_every_hostile_event_the_set_still_publishes_the_next_valid_one(
    client, token, resource_set
):
    with TestCase.captureOnCommitCallbacks(execute=True):
        first = post(client, token, as_json(event("first.txt")), "application/json")
    assert first.status_code == 200
    regenerate(resource_set)  # the first Change List now exists
    before_start = "2000-01-01T00:00:00Z"
    cases = [*HOSTILE.values(), Hostile(as_json(event(datetime=before_start)), "datetime")]

    batch = "[" + ",".join(case.body for case in cases if case.body.startswith("{")) + "]"
    assert post(client, token, batch, "application/json").status_code == 400
    for case in cases:
        with TestCase.captureOnCommitCallbacks(execute=True):
            response = post(client, token, case.body, case.content_type)
        assert 400 <= response.status_code < 500, (case, response.content)
    with TestCase.captureOnCommitCallbacks(execute=True):
        response = post(client, token, as_json(event("valid.txt")), "application/json")
    assert response.status_code == 200
    report = regenerate(resource_set)

    assert report is not None
    assert PREFIX + "valid.txt" in change_list_locs(client)
    assert PREFIX + "valid.txt" in resource_list_locs(client)
    assert datetime.now(UTC) - Change.objects.latest("id").datetime < timedelta(minutes=1)


def test_media_types_the_schema_cannot_express_leave_every_document_valid(
    client, token, resource_set
):
    """`application/vnd.ms-excel` and parameters are fine media types, accepted; the
    documents write them as the official schema takes them; the API keeps them whole."""
    odd = ["application/vnd.ms-excel", "text/html; charset=utf-8", "text/x_y"]
    events = [event(f"{n}.txt", mime=mime, ln=[link(mime=mime)]) for n, mime in enumerate(odd)]
    with TestCase.captureOnCommitCallbacks(execute=True):
        assert post(client, token, as_json(events), "application/json").status_code == 200
    regenerate(resource_set)

    for name in ("resourcelist.xml", "changelist.xml"):
        response = client.get(f"/resourcesync/acme/articles/{name}")
        document = assert_valid(b"".join(response.streaming_content))
        types = document.xpath("//rs:md/@type | //rs:ln/@type", namespaces=NS)
        assert sorted(types) == ["text/html", "text/html"]
    changes = client.get(
        reverse("api:changes", args=("acme", "articles")),
        headers={"Authorization": f"Token {token.plain_key}"},
    ).json()
    assert sorted(c["mime"] for c in changes["results"]) == sorted(odd)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's database-wide write lock")
def test_a_write_that_waits_out_the_lock_is_a_503_to_retry(file_database, live_server):
    """Another writer holds SQLite's lock past the wait: 503 with Retry-After, not a 500."""
    resource_set = make_set()
    token = ApiTokenFactory(provider=resource_set.provider)
    holder = sqlite3.connect(connection.settings_dict["NAME"], timeout=0)
    try:
        holder.execute("BEGIN IMMEDIATE")
        response = live_post(live_server.url, token, "acme/articles", [event("busy.txt")])
    finally:
        holder.rollback()
        holder.close()
    assert response.status == 503
    assert response.getheader("Retry-After") == "1"
    assert not Change.objects.filter(resource_set=resource_set).exists()


@pytest.mark.parametrize(
    "name",
    [
        "resourcelist-{}.xml",
        "changelist-{}.xml",
        "resourcedump-{}.xml",
        "resourcedump-package-{}.zip",
        "resourcedump-manifest-{}.xml",
        "changedump-package-{}.zip",
    ],
)
def test_a_document_number_no_database_column_holds_is_a_404(client, db, name):
    """SQLite refused to bind it (OverflowError): a 500 to anyone, on a protected set too."""
    make_set()
    make_set(slug="private", protected=True)

    for slug in ("articles", "private"):
        url = f"/resourcesync/acme/{slug}/" + name.format(2**63)
        assert client.get(url).status_code == 404, url
    assert client.get("/resourcesync/acme/articles/" + name.format(2**63 - 1)).status_code == 404


@pytest.mark.parametrize(
    "url",
    [
        "/admin/sources/change/?resource_set={}",
        "/admin/sources/resource/?resource_set={}",
        "/admin/journal/run/?resource_set={}",
        "/admin/notifications/subscription/?resource_set={}",
    ],
)
def test_an_admin_address_with_an_id_no_column_holds_is_a_400(admin_client, url):
    """A filter on a related set's id, named as the list filter's field: SQLite refused to
    bind a larger one (OverflowError), a 500."""
    make_set()
    response = admin_client.get(url.format(2**70))
    if connection.vendor != "sqlite":  # PostgreSQL compares it, and finds no row
        assert response.status_code == 200
        return
    assert response.status_code == 400
    assert b"larger than any id" in response.content
