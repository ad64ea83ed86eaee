"""Turn decoded event objects into `Event`s, or say which field is wrong.

Hand-written rather than DRF serializers: a bulk request carries 100,000
events and a serializer per event costs more than applying it. The wire
format is described for OpenAPI by `serializers.EventSerializer`; a test
keeps the two field lists in step.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from sitemaps.protocol.constants import ChangeType
from sitemaps.protocol.uris import is_any_uri, loc_problem, uri_problem
from sitemaps.protocol.xmlchars import describe, forbidden_character
from sources.events import Event, LinkData
from sources.locations import LocationError, resolve_location
from sources.models import LocationType, ResourceSet
from sources.services import MAX_REPORTED_ERRORS, EventError, EventsRejected

from .parsers import MalformedEvent, OverlongNumber

EVENT_FIELDS = frozenset(
    {"change", "location", "length", "md5", "sha256", "mime", "lastmod", "ln", "datetime", "id"}
)
LOCATION_FIELDS = frozenset({"type", "value"})
LINK_FIELDS = frozenset({"rel", "href", "mime"})
#: Fields a created or updated event must carry; a deleted event may omit them.
CONTENT_FIELDS = ("length", "md5", "mime", "lastmod")

CHANGE_TYPES = frozenset(ChangeType)
LOCATION_TYPES = frozenset(LocationType.values)
MAX_LENGTH = 2**63 - 1  # BigIntegerField
MAX_MIME_LENGTH = 255
MAX_ID_LENGTH = 200
MAX_LINKS = 100
#: As long as a URI may be (a `<loc>`): the mirror indexes a relation as one keyword,
#: and Lucene refuses a term over 32,766 bytes, and with it the change's document.
MAX_REL_LENGTH = 2048
#: A location's value as posted: longer than any whose URI fits (a 1,000-character root
#: and a 2,048-character URI), and at 4 bytes a character under the 32,766 bytes of the
#: keyword the mirror indexes it as (`a////b` resolves to `a/b`: the URI does not bound it).
MAX_VALUE_LENGTH = 4096
#: A change's `datetime` orders and selects the Change Lists, in the mirror too, whose
#: `date_nanos` holds no earlier instant: Elasticsearch refused such a change for good.
EARLIEST_DATETIME = datetime(1970, 1, 1, tzinfo=UTC)

_md5 = re.compile(r"[0-9a-fA-F]{32}").fullmatch
#: A registered relation name, as the schema's `relType` spells one (or else a URI).
_rel_token = re.compile(r"[a-z][a-z0-9.\-]*").fullmatch
_sha256 = re.compile(r"[0-9a-fA-F]{64}").fullmatch
# type "/" subtype, optionally followed by parameters (RFC 6838 names).
_mime = re.compile(r"[A-Za-z0-9][\w!#$&^.+-]*/[A-Za-z0-9][\w!#$&^.+-]*(\s*;[^\x00-\x1f\x7f]*)?")
_known_types = ", ".join(sorted(CHANGE_TYPES))
_known_location_types = ", ".join(sorted(LOCATION_TYPES))


class _Invalid(Exception):
    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message


class EventValidator:
    """Validates the events of one request against one resource set's locations."""

    def __init__(self, resource_set: ResourceSet) -> None:
        self.url_prefix = resource_set.url_prefix
        self.resource_root_dir = resource_set.resource_root_dir
        self.clock_skew = settings.INGEST_CLOCK_SKEW_SECONDS
        #: A change dated later would close the open Change List in the future.
        self.latest = timezone.now() + timedelta(seconds=self.clock_skew)

    def validate_body(self, items: Iterable[object]) -> list[Event]:
        """Every event of a body, validated before any lock is taken, or EventsRejected.

        The events are held in memory (about 1 KB each), which the body limit bounds.
        """
        events: list[Event] = []
        errors: list[EventError] = []
        for item in self.validate_all(items):
            if isinstance(item, EventError):
                errors.append(item)
                if len(errors) >= MAX_REPORTED_ERRORS:
                    break
            elif not errors:
                events.append(item)
        if errors:
            raise EventsRejected(errors)
        return events

    def validate_all(self, items: Iterable[object]) -> Iterator[Event | EventError]:
        """One Event or EventError per item, in order, as `ingest_events` expects."""
        for index, item in enumerate(items):
            if isinstance(item, MalformedEvent):
                yield EventError(index, "body", item.message)
            else:
                yield self.validate(item, index=index)

    def validate(self, data: object, *, index: int) -> Event | EventError:
        """The first problem found is reported; an event has at most one error."""
        try:
            return self._event(data)
        except _Invalid as exc:
            return EventError(index, exc.field, exc.message)

    def _event(self, data: object) -> Event:
        if not isinstance(data, dict):
            raise _Invalid("body", f"an event must be a JSON object, not {_json_type(data)}.")
        _reject_unknown(data, EVENT_FIELDS, "")
        change = data.get("change")
        if change is None:
            raise _Invalid("change", "is required.")
        if not isinstance(change, str) or change not in CHANGE_TYPES:
            raise _Invalid("change", f"must be one of {_known_types}, not {change!r}.")
        if change != ChangeType.DELETED:
            for name in CONTENT_FIELDS:
                if data.get(name) is None:
                    raise _Invalid(name, f"is required for a {change} event.")
        location_type, location_value, uri = self._location(
            data.get("location"), "location", loc_problem
        )
        length = data.get("length")
        if length is not None:
            length = _length(length)
        md5 = data.get("md5")
        sha256 = data.get("sha256")
        mime = data.get("mime")
        lastmod = data.get("lastmod")
        links = data.get("ln")
        moment = data.get("datetime")
        event_id = data.get("id")
        return Event(
            change=change,
            location_type=location_type,
            location_value=location_value,
            uri=uri,
            length=length,
            md5=_digest(md5, "md5", _md5, 32) if md5 is not None else "",
            sha256=_digest(sha256, "sha256", _sha256, 64) if sha256 not in (None, "") else "",
            mime=_mime_type(mime, "mime") if mime is not None else "",
            lastmod=_timestamp(lastmod, "lastmod") if lastmod is not None else None,
            links=self._links(links) if links is not None else (),
            datetime=self._datetime(moment) if "datetime" in data else None,
            id=_event_id(event_id) if event_id is not None else "",
        )

    def _location(
        self, data: object, path: str, problem: Callable[[str], str | None] = uri_problem
    ) -> tuple[str, str, str]:
        """The location's type, value and URI; `problem` says what the URI's place in a
        document (a `<loc>`, a link's `href`) refuses."""
        if data is None:
            raise _Invalid(path, "is required.")
        if not isinstance(data, dict):
            raise _Invalid(path, 'must be an object like {"type": "url", "value": "..."}.')
        _reject_unknown(data, LOCATION_FIELDS, path)
        location_type = data.get("type")
        if location_type is None:
            raise _Invalid(f"{path}.type", "is required.")
        if not isinstance(location_type, str) or location_type not in LOCATION_TYPES:
            raise _Invalid(
                f"{path}.type", f"must be one of {_known_location_types}, not {location_type!r}."
            )
        value = _location_value(data.get("value"), f"{path}.value")
        try:
            uri = resolve_location(
                location_type,
                value,
                url_prefix=self.url_prefix,
                resource_root_dir=self.resource_root_dir,
            )
        except LocationError as exc:
            raise _Invalid(f"{path}.value", str(exc)) from exc
        if uri is not value:
            _writable(uri, f"{path}.value", "resolves to a URI that")
        found = problem(uri)
        if found is not None:
            subject = "" if uri is value else f"resolves to {uri!r}, which "
            raise _Invalid(f"{path}.value", f"{subject}{found}.")
        return location_type, value, uri

    def _datetime(self, value: object) -> datetime:
        if value is None:  # the schema's string or nothing: null is no instant, nor "now"
            raise _Invalid(
                "datetime",
                "must be an ISO 8601 string, not null; leave it out to date the change at "
                "its receipt.",
            )
        moment = _timestamp(value, "datetime")
        if moment < EARLIEST_DATETIME:
            raise _Invalid("datetime", "must not be before 1970-01-01T00:00:00Z.")
        if moment > self.latest:
            raise _Invalid(
                "datetime",
                f"is later than the server's clock plus {self.clock_skew} seconds; "
                "a change cannot be dated in the future.",
            )
        return moment

    def _links(self, data: object) -> tuple[LinkData, ...]:
        if not isinstance(data, list):
            raise _Invalid("ln", f"must be an array, not {_json_type(data)}.")
        if len(data) > MAX_LINKS:
            raise _Invalid("ln", f"may hold at most {MAX_LINKS} links.")
        links = []
        for position, link in enumerate(data):
            path = f"ln.{position}"
            if not isinstance(link, dict):
                raise _Invalid(path, f"must be an object, not {_json_type(link)}.")
            _reject_unknown(link, LINK_FIELDS, path)
            rel = link.get("rel")
            if not isinstance(rel, str) or not rel.strip():
                raise _Invalid(f"{path}.rel", "is required and must be a non-empty string.")
            if len(rel) > MAX_REL_LENGTH:
                raise _Invalid(f"{path}.rel", f"must be at most {MAX_REL_LENGTH} characters long.")
            # A relation is a token or a URI: stricter than what XML allows (xmlchars).
            if not rel.isprintable():
                raise _Invalid(f"{path}.rel", "must not contain control or unprintable characters.")
            if not _rel_token(rel) and not is_any_uri(rel):
                raise _Invalid(
                    f"{path}.rel", "must be a relation name (e.g. describedby) or a valid URI."
                )
            href_type, href_value, uri = self._location(link.get("href"), f"{path}.href")
            mime = link.get("mime")
            links.append(
                LinkData(
                    rel=rel,
                    href_type=href_type,
                    href_value=href_value,
                    mime=_mime_type(mime, f"{path}.mime") if mime not in (None, "") else "",
                    uri=uri,
                )
            )
        return tuple(links)


def _location_value(value: object, field: str) -> str:
    """A location's value as posted, which the database and the mirror keep as it is."""
    if value is None:
        raise _Invalid(field, "is required.")
    if not isinstance(value, str):
        raise _Invalid(field, f"must be a string, not {_json_type(value)}.")
    if len(value) > MAX_VALUE_LENGTH:
        raise _Invalid(field, f"must be at most {MAX_VALUE_LENGTH} characters long.")
    _writable(value, field)
    return value


def _reject_unknown(data: dict[str, Any], known: frozenset[str], path: str) -> None:
    if data.keys() <= known:
        return
    expected = ", ".join(sorted(known))
    # A name may hold a lone surrogate, which no JSON answer could carry.
    unknown = sorted(set(data) - known)[0].encode("utf-8", "backslashreplace").decode()
    if not unknown:  # "" as the field would name nothing: name the object that holds it
        raise _Invalid(
            path or "body",
            f'has a field named "" (empty), which is not allowed; expected {expected}.',
        )
    raise _Invalid(
        f"{path}.{unknown}" if path else unknown, f"is not a known field; expected {expected}."
    )


def _writable(value: str, field: str, subject: str = "") -> None:
    """Refuse what a document could not hold (sitemaps.protocol.xmlchars), before it is stored."""
    if value.isascii() and value.isprintable():  # the usual case, without a call
        return
    found = forbidden_character(value)
    if found is not None:
        position, character = found
        what = f"{subject} contains" if subject else "contains"
        raise _Invalid(
            field, f"{what} {describe(character)} at position {position}, not allowed in XML 1.0."
        )


def _length(value: object) -> int:
    if isinstance(value, OverlongNumber):
        raise _Invalid("length", f"must be at most {MAX_LENGTH}.")
    # bool is an int subclass in Python, but `true` is not a length.
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Invalid("length", f"must be an integer, not {_json_type(value)}.")
    if value < 0:
        raise _Invalid("length", "must not be negative.")
    if value > MAX_LENGTH:
        raise _Invalid("length", f"must be at most {MAX_LENGTH}.")
    return value


def _digest(value: object, field: str, pattern: Any, digits: int) -> str:
    if not isinstance(value, str) or not pattern(value):
        raise _Invalid(field, f"must be {digits} hexadecimal digits.")
    return value.lower()


def _mime_type(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise _Invalid(field, f"must be a string, not {_json_type(value)}.")
    if len(value) > MAX_MIME_LENGTH or not _mime.fullmatch(value):
        raise _Invalid(field, 'must be a media type like "text/plain".')
    if not value.isascii():  # the pattern refuses ASCII controls already
        _writable(value, field)
    return value


def _timestamp(value: object, field: str) -> datetime:
    if not isinstance(value, str):
        raise _Invalid(field, f"must be an ISO 8601 string, not {_json_type(value)}.")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise _Invalid(field, f"is not an ISO 8601 date and time: {value!r}.") from exc
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise _Invalid(field, "must include a time zone, e.g. 'Z' or '+02:00'.")
    try:
        # Every supported database holds years 1 to 9999 in UTC, no more.
        return moment.astimezone(UTC)
    except OverflowError as exc:
        raise _Invalid(field, "must lie between the years 1 and 9999 in UTC.") from exc


def _event_id(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _Invalid("id", f"must be a string, not {_json_type(value)}.")
    event_id = str(value)  # an OverlongNumber is its digits
    if not event_id or len(event_id) > MAX_ID_LENGTH:
        raise _Invalid("id", f"must be 1 to {MAX_ID_LENGTH} characters long.")
    _writable(event_id, "id")
    return event_id


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, OverlongNumber):
        return f"a number of {len(value)} digits"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
