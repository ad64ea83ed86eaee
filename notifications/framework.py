"""Framework notifications: which capability documents were created, updated or deleted.

Each check compares the documents a set serves now (their ETags) with what
the last check announced (`AnnouncedDocument`), so a regeneration run, an
admin edit or a rerun all lead to the same, exact announcements. An index is
never announced (spec §10): its parts are, with `rel="index"`; a set's only
Resource List (or Change List) is its own document at `resourcelist.xml`
(`changelist.xml`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from sitemaps import descriptions, links
from sitemaps.models import ChangeListPage, DumpDocument, IndexDocument, ResourceListPage
from sitemaps.protocol.builders import FrameworkChange, build_framework_notification
from sitemaps.protocol.constants import Capability, ChangeType
from sitemaps.storage import content_etag
from sources.models import ResourceSet
from sources.services import resource_set_lock

from .models import AnnouncedDocument, TopicKind
from .publisher import locked_topic, publish
from .topics import publishes_notifications

#: Documents whose notifications point `up` to the Source Description.
ABOUT_SOURCE = frozenset({Capability.CAPABILITY_LIST, Capability.DESCRIPTION})


@dataclass(frozen=True, slots=True)
class ServedDocument:
    loc: str
    capability: str
    etag: str
    index_url: str = ""


def served_documents(resource_set: ResourceSet) -> list[ServedDocument]:
    """The set's Capability List and the lists it serves now (never an index)."""
    served = [
        ServedDocument(
            links.capability_list_url(resource_set),
            Capability.CAPABILITY_LIST,
            content_etag(descriptions.capability_list(resource_set)),
        )
    ]
    capabilities = resource_set.capabilities
    if capabilities.publish_resource_list:
        served += resource_lists(resource_set)
    if capabilities.publish_change_list:
        served += change_lists(resource_set)
    for kind in descriptions.written_dumps(resource_set):
        served += dumps(resource_set, kind)
    return served


def dumps(resource_set: ResourceSet, kind: str) -> list[ServedDocument]:
    """A dump's parts under its index, or the dump itself while it is one document."""
    rows = list(
        DumpDocument.objects.filter(resource_set=resource_set, kind=kind)
        .exclude(storage_name="")
        .order_by("number")
    )
    top_url = links.dump_url(resource_set, kind)
    parts = [row for row in rows if row.number > 0]
    if parts:
        return [
            ServedDocument(
                links.dump_part_url(resource_set, kind, row.number), kind, row.etag, top_url
            )
            for row in parts
        ]
    return [ServedDocument(top_url, kind, row.etag) for row in rows]


def change_lists(resource_set: ResourceSet) -> list[ServedDocument]:
    """The lists under `changelist.xml` (archived ones too: they are still served), or
    `changelist.xml` itself while the set has one list and no archive."""
    return _lists(
        resource_set,
        ChangeListPage,
        Capability.CHANGE_LIST,
        links.change_list_url(resource_set),
        links.change_list_page_url,
    )


def resource_lists(resource_set: ResourceSet) -> list[ServedDocument]:
    """The parts under `resourcelist.xml`, or `resourcelist.xml` itself while it is one list."""
    return _lists(
        resource_set,
        ResourceListPage,
        Capability.RESOURCE_LIST,
        links.resource_list_url(resource_set),
        links.resource_list_page_url,
    )


def _lists(
    resource_set: ResourceSet,
    page_model: type[ChangeListPage] | type[ResourceListPage],
    capability: Capability,
    index_url: str,
    page_url: Callable[[ResourceSet, int], str],
) -> list[ServedDocument]:
    """A set's written pages of one kind under their index, or the index alone while it
    is the one list (an index itself is never announced)."""
    pages = list(page_model.objects.filter(resource_set=resource_set).exclude(storage_name=""))
    if len(pages) > 1:
        return [
            ServedDocument(page_url(resource_set, page.number), capability, page.etag, index_url)
            for page in pages
        ]
    single = IndexDocument.objects.filter(resource_set=resource_set, kind=capability.value)
    return [
        ServedDocument(index_url, capability, doc.etag) for doc in single.exclude(storage_name="")
    ]


#: The changes the notification spec lets each document announce (its table of
#: framework notifications); `deleted` only for Capability Lists and Source Descriptions.
ALLOWED_CHANGES: dict[str, frozenset[str]] = {
    Capability.RESOURCE_LIST: frozenset({ChangeType.CREATED, ChangeType.UPDATED}),
    Capability.RESOURCE_DUMP: frozenset({ChangeType.CREATED}),
    Capability.CHANGE_LIST: frozenset({ChangeType.CREATED, ChangeType.UPDATED}),
    Capability.CHANGE_DUMP: frozenset({ChangeType.CREATED, ChangeType.UPDATED}),
}
EVERY_CHANGE = frozenset({ChangeType.CREATED, ChangeType.UPDATED, ChangeType.DELETED})


def announceable(capability: str, change: str) -> str | None:
    """The change a document may announce: a Resource Dump rewritten is a new one
    (`created`), and a list or dump gone is not announced at all."""
    allowed = ALLOWED_CHANGES.get(capability, EVERY_CHANGE)
    if change in allowed:
        return change
    return ChangeType.CREATED if change == ChangeType.UPDATED else None


def changes_since_announced(
    resource_set: ResourceSet | None, served: Iterable[ServedDocument], now: datetime
) -> list[FrameworkChange]:
    """Compare with the last announcement, and record what is served now."""
    announced = {
        row.loc: row for row in AnnouncedDocument.objects.filter(resource_set=resource_set)
    }
    changes: list[FrameworkChange] = []
    for document in served:
        known = announced.pop(document.loc, None)
        if known is not None and known.etag == document.etag:
            continue
        change = announceable(
            document.capability, ChangeType.CREATED if known is None else ChangeType.UPDATED
        )
        assert change is not None, "every document may announce its creation"
        changes.append(
            FrameworkChange(
                document.loc, document.capability, change, now, document.index_url or None
            )
        )
        AnnouncedDocument.objects.update_or_create(
            resource_set=resource_set,
            loc=document.loc,
            defaults={
                "capability": document.capability,
                "etag": document.etag,
                "index_url": document.index_url,
            },
        )
    for gone in announced.values():
        if announceable(gone.capability, ChangeType.DELETED) is not None:
            changes.append(
                FrameworkChange(
                    gone.loc, gone.capability, ChangeType.DELETED, now, gone.index_url or None
                )
            )
        gone.delete()
    return changes


def source_description_changes(now: datetime) -> list[FrameworkChange]:
    """The public Source Description, if it changed since last announced."""
    served = ServedDocument(
        links.source_description_url(),
        Capability.DESCRIPTION,
        content_etag(descriptions.source_description(None)),
    )
    return changes_since_announced(None, [served], now)


def framework_payloads(
    resource_set: ResourceSet, changes: list[FrameworkChange]
) -> list[tuple[bytes, int]]:
    """One payload `up` to the Capability List for its lists, one `up` to the Source
    Description for the Capability List and the Source Description themselves;
    each with its number of entries."""
    lists = [change for change in changes if change.capability not in ABOUT_SOURCE]
    about_source = [change for change in changes if change.capability in ABOUT_SOURCE]
    payloads = []
    if lists:
        up = links.capability_list_url(resource_set)
        payloads.append((build_framework_notification(lists, up_url=up), len(lists)))
    if about_source:
        up = links.source_description_url()
        payloads.append((build_framework_notification(about_source, up_url=up), len(about_source)))
    return payloads


def announce(resource_set_ids: Iterable[int] | None = None) -> list[int]:
    """Check the sets' documents (all sets publishing notifications with None) and the
    Source Description, and notify what changed; returns the deliveries to send."""
    now = timezone.now()
    sets = ResourceSet.objects.select_related("provider", "capability_settings")
    if resource_set_ids is not None:
        sets = sets.filter(pk__in=list(resource_set_ids))
    publishing = [s for s in sets.order_by("pk") if publishes_notifications(s)]
    if not publishing:
        return []
    delivery_ids: list[int] = []
    with transaction.atomic():
        for resource_set in publishing:  # in key order, so two runs never deadlock
            resource_set_lock(resource_set=resource_set)
        about_source = source_description_changes(now) if resource_set_ids is None else []
        for resource_set in publishing:
            delivery_ids += announce_set(resource_set, about_source, now)
    return delivery_ids


def announce_set(
    resource_set: ResourceSet, about_source: list[FrameworkChange], now: datetime
) -> list[int]:
    topic = locked_topic(resource_set, TopicKind.FRAMEWORK)
    changes = changes_since_announced(resource_set, served_documents(resource_set), now)
    payloads = framework_payloads(resource_set, changes + about_source)
    if not payloads:
        return []
    _, delivery_ids = publish(
        topic, [(payload, count, None, None) for payload, count in payloads], now
    )
    topic.save()
    return delivery_ids
