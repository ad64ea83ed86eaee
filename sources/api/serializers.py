"""Shapes of the API's requests and answers, for responses and the OpenAPI schema.

Events are validated by `sources.api.validation` (plain Python, for bulk
speed); `EventSerializer` only documents their wire format.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from sitemaps.protocol.constants import ChangeType
from sources.models import LocationType
from sources.services import MAX_REPORTED_ERRORS

from .validation import MAX_ID_LENGTH, MAX_REL_LENGTH, MAX_VALUE_LENGTH


class LocationSerializer(serializers.Serializer):
    type = serializers.ChoiceField(
        choices=LocationType.choices,
        help_text="`url`: used as is (http or https). `abs_path`: a file inside the set's "
        "resource_root_dir. `rel_path`: relative to the set's url_prefix.",
    )
    value = serializers.CharField(max_length=MAX_VALUE_LENGTH)


class LinkSerializer(serializers.Serializer):
    rel = serializers.CharField(
        max_length=MAX_REL_LENGTH, help_text="Link relation, e.g. `describedby`, or a URI."
    )
    href = LocationSerializer()
    mime = serializers.CharField(required=False, allow_blank=True)
    uri = serializers.CharField(read_only=True, help_text="The resolved href.")


class EventSerializer(serializers.Serializer):
    """One event. `length`, `md5`, `mime` and `lastmod` are required unless `change` is deleted."""

    change = serializers.ChoiceField(choices=ChangeType.choices())
    location = LocationSerializer()
    length = serializers.IntegerField(min_value=0, required=False, help_text="Size in bytes.")
    md5 = serializers.RegexField(
        r"^[0-9a-fA-F]{32}$", required=False, help_text="Stored in lowercase."
    )
    sha256 = serializers.RegexField(
        r"^[0-9a-fA-F]{64}$", required=False, help_text="Stored in lowercase."
    )
    mime = serializers.CharField(required=False, help_text="Media type, e.g. `text/plain`.")
    lastmod = serializers.DateTimeField(
        required=False, help_text="ISO 8601 with a time zone: last modification of the resource."
    )
    ln = LinkSerializer(many=True, required=False)
    datetime = serializers.DateTimeField(
        required=False,
        help_text="ISO 8601 with a time zone: when the change happened. Default (left out; "
        "null is refused): time of receipt. Must not be earlier than the start of the set's "
        "open change list, nor than 1970.",
    )
    id = serializers.CharField(
        required=False,
        max_length=MAX_ID_LENGTH,
        help_text="The client's event id: an event retried with the same id is counted as "
        "a duplicate and not applied again.",
    )


class IngestCountsSerializer(serializers.Serializer):
    accepted = serializers.IntegerField(help_text="Events applied; each appended one change.")
    created = serializers.IntegerField()
    updated = serializers.IntegerField()
    deleted = serializers.IntegerField()
    duplicates = serializers.IntegerField(help_text="Events skipped: their id was seen before.")


class EventErrorSerializer(serializers.Serializer):
    index = serializers.IntegerField(
        allow_null=True,
        help_text="Position of the event in the body, from 0; null for an error about the "
        "whole body (empty, too large).",
    )
    field = serializers.CharField(
        help_text="Dotted path, e.g. `location.value`, `ln.0.href.type`; `body` for "
        "malformed JSON or NDJSON and for size limits. A field with an empty name is "
        "reported at the object holding it (`location`, `ln.0`; `body` for the event itself)."
    )
    message = serializers.CharField()


class ErrorListSerializer(serializers.Serializer):
    errors = EventErrorSerializer(
        many=True, help_text=f"At most {MAX_REPORTED_ERRORS}, in request order."
    )


class DetailSerializer(serializers.Serializer):
    detail = serializers.CharField()


class StoredLocationSerializer(serializers.Serializer):
    type = serializers.CharField(source="location_type")
    value = serializers.CharField(source="location_value")


class ResourceSerializer(serializers.Serializer):
    location = StoredLocationSerializer(source="*")
    uri = serializers.CharField()
    length = serializers.IntegerField()
    md5 = serializers.CharField()
    sha256 = serializers.CharField(help_text="Empty when none was posted.")
    mime = serializers.CharField()
    lastmod = serializers.DateTimeField()
    ln = LinkSerializer(many=True)
    timestamp = serializers.DateTimeField(help_text="When the portal last wrote the resource.")


class ChangeSerializer(serializers.Serializer):
    change = serializers.ChoiceField(choices=ChangeType.choices(), help_text="As applied.")
    location = StoredLocationSerializer(source="*")
    uri = serializers.CharField()
    length = serializers.IntegerField(allow_null=True)
    md5 = serializers.CharField()
    sha256 = serializers.CharField()
    mime = serializers.CharField()
    lastmod = serializers.DateTimeField(allow_null=True)
    ln = LinkSerializer(many=True)
    datetime = serializers.DateTimeField(help_text="When the change happened.")
    timestamp = serializers.DateTimeField(help_text="When the portal received it.")
    id = serializers.CharField(source="event_id", help_text="The client's event id, or empty.")


class ChangePageSerializer(serializers.Serializer):
    next = serializers.URLField(
        allow_null=True, help_text="The next page, or null on the last page."
    )
    results = ChangeSerializer(many=True)


class ResourceSetSerializer(serializers.Serializer):
    provider = serializers.CharField(source="provider.slug")
    set = serializers.CharField(source="slug")
    name = serializers.CharField()
    description = serializers.CharField()
    url_prefix = serializers.URLField()
    resource_root_dir = serializers.CharField()
    protected = serializers.BooleanField()
    changed_at = serializers.DateTimeField(allow_null=True)
    accepts_changes_since = serializers.DateTimeField(
        allow_null=True, help_text="Events may not be dated earlier than this."
    )


#: The greatest change id a database holds (a signed 64-bit key).
MAX_KEY = 2**63 - 1


@extend_schema_field(OpenApiTypes.STR)
class ChangeCursorField(serializers.Field):
    """An opaque page cursor: the (datetime, id) key of the last change served."""

    default_error_messages = {"invalid": "is not a cursor from a `next` link."}

    def to_representation(self, value: tuple[datetime, int]) -> str:
        moment, key = value
        raw = f"{moment.isoformat()}|{key}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def to_internal_value(self, data: object) -> tuple[datetime, int]:
        text = data if isinstance(data, str) else ""
        if not text or len(text) > 200:
            self.fail("invalid")
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
            moment_text, _, key_text = raw.partition("|")
            moment = datetime.fromisoformat(moment_text)
            key = int(key_text)
            # In UTC, as the database compares it: 9999-12-31 at -12:00 is past year 9999.
            moment.astimezone(UTC)
        except (ValueError, OverflowError):
            self.fail("invalid")
        if moment.tzinfo is None or not 0 <= key <= MAX_KEY:
            self.fail("invalid")
        return moment, key
