"""Elasticsearch mirrors of `Resource` and `Change` (the seeds' two types).

Modern Elasticsearch has no mapping types and no `not_analyzed`: keywords
replace them, and `date_nanos` keeps the database's microseconds so both
stores order changes identically. Signals are ignored: `sources.indexing`
indexes after commit.

The seeds map `location`, `ln` and each link's `href` as `nested`. A nested
object is a Lucene document of its own, so that made every resource and
change four documents (itself, its location, each link and its href). Only
`ln` is a list, where `nested` keeps a link's fields together in a query; a
location and an href are one object each, so as plain objects they keep the
same fields and every query the same meaning: two Lucene documents per
linked resource instead of four. `manage.py reconcile --rebuild` moves an
existing deployment's indices to this mapping (MAPPING_VERSION).

Nested links are Lucene documents between the resources, so a page's hits
never have contiguous document ids and Elasticsearch cannot read their stored
fields (`_source`) in one sequential pass: it decompresses a block again for
every hit. So each document also holds `record`, what the generator reads of
it (its record's fields, then the links' rel, uri and mime, as JSON) in doc
values only: a `binary` field, not indexed, without a length limit, and left
out of `_source`, which the mirror always rebuilds from the database. Queries
keep using the seeds' fields; `record` answers none.

The Elasticsearch generator names its indices from its own INDEX_PREFIX and
takes their mappings from here; these registered indices carry the default
generator's prefix, so `manage.py search_index` creates the indices it writes.
"""

import base64
from typing import Any, ClassVar

import orjson
from django.conf import settings
from django_elasticsearch_dsl import Document, Index, fields
from django_elasticsearch_dsl.registries import registry
from elasticsearch.dsl import MetaField
from elasticsearch.dsl.field import Binary

from .models import Change, Resource

INDEX_SETTINGS = {"number_of_shards": 1, "number_of_replicas": 0}
#: Bumped when the mappings change; `reconcile --rebuild` names new indices after it.
MAPPING_VERSION = 3
#: Of the indices' names, when the generator's settings entry gives none.
DEFAULT_INDEX_PREFIX = "resourcesync"


def index_names(prefix: str) -> tuple[str, str]:
    """The resources and changes indices of one prefix."""
    return f"{prefix}-resources", f"{prefix}-changes"


_default_prefix = settings.RESOURCESYNC_GENERATORS.get("default", {}).get(
    "INDEX_PREFIX", DEFAULT_INDEX_PREFIX
)
resources_index = Index(index_names(_default_prefix)[0])
resources_index.settings(**INDEX_SETTINGS)
changes_index = Index(index_names(_default_prefix)[1])
changes_index.settings(**INDEX_SETTINGS)

DATE_NANOS = {"type": "date_nanos", "format": "strict_date_optional_time_nanos"}


def location_field() -> fields.ObjectField:
    """One object per document (or link): `nested` would only add a Lucene document."""
    return fields.ObjectField(
        properties={"type": fields.KeywordField(), "value": fields.KeywordField()}
    )


def links_field() -> fields.NestedField:
    return fields.NestedField(
        properties={
            "rel": fields.KeywordField(),
            "href": location_field(),
            "mime": fields.KeywordField(),
            "uri": fields.KeywordField(),
        }
    )


class DateNanosField(fields.DEDField, fields.Date):
    name = "date_nanos"


def date_nanos() -> DateNanosField:
    return DateNanosField(format=DATE_NANOS["format"])


#: `lastmod` is the source's own value, from year 1 to 9999 (what the API takes), where
#: `date_nanos` holds 1970 to 2262. Outside that a document is kept, its `lastmod` in
#: `_source` and `record` but not searchable, rather than refused: a refused change is
#: never indexed, and no page is built from the copy until it is.
LASTMOD = {**DATE_NANOS, "ignore_malformed": True}


def lastmod_field() -> DateNanosField:
    return DateNanosField(format=LASTMOD["format"], ignore_malformed=LASTMOD["ignore_malformed"])


class BinaryField(fields.DEDField, Binary):
    pass


#: What `record` holds before the links, in the order of the generator's records.
RESOURCE_RECORD_FIELDS = ("key", "uri", "lastmod", "length", "md5", "mime", "sha256")
CHANGE_RECORD_FIELDS = (
    "key", "resource_key", "uri", "change", "datetime", "lastmod", "length", "md5", "mime",
    "sha256",
)  # fmt: skip


def record_value(source: dict[str, Any], names: tuple[str, ...]) -> str:
    """These `_source` fields, then the links' rel, uri and mime: JSON, base64 as `binary` wants."""
    links = [[link["rel"], link["uri"], link.get("mime") or ""] for link in source["ln"] or ()]
    return base64.b64encode(orjson.dumps([*map(source.get, names), links])).decode("ascii")


def isoformat(value) -> str | None:
    return value.isoformat() if value is not None else None


class SnapshotFields:
    """Fields and preparation shared by both documents."""

    record_fields: ClassVar[tuple[str, ...]]

    def prepare_resource_set(self, instance) -> str:
        return instance.resource_set.path

    def prepare_location(self, instance) -> dict[str, str]:
        return {"type": instance.location_type, "value": instance.location_value}

    def prepare_lastmod(self, instance) -> str | None:
        return isoformat(instance.lastmod)

    def prepare_timestamp(self, instance) -> str | None:
        return isoformat(instance.timestamp)

    def prepare_ln(self, instance) -> list[dict]:
        return instance.ln

    def prepare_record(self, instance) -> None:
        return None  # `prepare` builds it from the other fields

    def prepare(self, instance) -> dict[str, Any]:
        source = super().prepare(instance)  # type: ignore[misc]
        source["record"] = record_value(source, self.record_fields)
        return source


@registry.register_document
@resources_index.document
class ResourceDocument(SnapshotFields, Document):
    record_fields = RESOURCE_RECORD_FIELDS
    key = fields.LongField(attr="id")
    resource_set_id = fields.LongField()
    resource_set = fields.KeywordField()
    location = location_field()
    uri = fields.KeywordField()
    length = fields.LongField()
    md5 = fields.KeywordField()
    sha256 = fields.KeywordField()
    mime = fields.KeywordField()
    lastmod = lastmod_field()
    ln = links_field()
    record = BinaryField(doc_values=True)
    timestamp = date_nanos()

    class Meta:
        source = MetaField(excludes=["record"])

    class Django:
        model = Resource
        ignore_signals = True
        auto_refresh = False


@registry.register_document
@changes_index.document
class ChangeDocument(SnapshotFields, Document):
    record_fields = CHANGE_RECORD_FIELDS
    key = fields.LongField(attr="id")
    resource_key = fields.LongField()
    resource_set_id = fields.LongField()
    resource_set = fields.KeywordField()
    change = fields.KeywordField()
    location = location_field()
    uri = fields.KeywordField()
    length = fields.LongField()
    md5 = fields.KeywordField()
    sha256 = fields.KeywordField()
    mime = fields.KeywordField()
    lastmod = lastmod_field()
    ln = links_field()
    record = BinaryField(doc_values=True)
    datetime = date_nanos()
    timestamp = date_nanos()

    class Meta:
        source = MetaField(excludes=["record"])

    class Django:
        model = Change
        ignore_signals = True
        auto_refresh = False

    def prepare_datetime(self, instance) -> str:
        return instance.datetime.isoformat()
