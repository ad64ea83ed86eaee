"""The two small documents built per request from the database."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from notifications import topics
from sources.models import ApiToken, ResourceSet

from . import change_list_archive, links
from .dumps.build import dump_problem
from .models import DumpDocument, IndexDocument
from .protocol.builders import (
    CapabilityEntry,
    CapabilityListRef,
    build_capability_list,
    build_source_description,
)
from .protocol.constants import Capability


def visible_sets(token: ApiToken | None) -> QuerySet[ResourceSet]:
    """Public sets, plus the protected sets this token reaches."""
    sets = ResourceSet.objects.filter(provider__active=True).select_related("provider")
    if token is not None and token.is_staff:
        return sets
    reach = Q(protected=False)
    if token is not None:
        reach |= Q(provider_id=token.provider_id)
    return sets.filter(reach)


def source_description(token: ApiToken | None) -> bytes:
    """Every set's Capability List; protected ones only for a token that reaches them."""
    refs = [CapabilityListRef(loc=links.capability_list_url(s)) for s in visible_sets(token)]
    return build_source_description(refs)


def written_documents(resource_set: ResourceSet) -> set[str]:
    """Kinds ("resourcelist", "changelist") whose top document is stored for the set."""
    rows = IndexDocument.objects.filter(resource_set=resource_set).exclude(storage_name="")
    return set(rows.values_list("kind", flat=True))


def missing_documents(resource_set: ResourceSet) -> set[str]:
    """Kinds the set publishes whose top document (or dump) is not written yet.

    Dumps the set cannot build (no files it can read) are not waited for: a run
    would only record why again.
    """
    capabilities = resource_set.capabilities
    dumps = dump_problem(resource_set) is None
    published = {
        Capability.RESOURCE_LIST: capabilities.publish_resource_list,
        Capability.CHANGE_LIST: capabilities.publish_change_list,
        Capability.RESOURCE_DUMP: dumps and capabilities.publish_resource_dump,
        Capability.CHANGE_DUMP: dumps and capabilities.publish_change_dump,
    }
    wanted = {str(kind) for kind, on in published.items() if on}
    return wanted - written_documents(resource_set) - set(written_dumps(resource_set))


def capability_list(resource_set: ResourceSet) -> bytes:
    """One entry per capability the set publishes (and this portal implements).

    Only documents already written are listed, so no entry ever answers 404,
    even in the moment between a capability being turned on and its first run.
    """
    capabilities = resource_set.capabilities
    written = written_documents(resource_set)
    entries = []
    if capabilities.publish_resource_list and Capability.RESOURCE_LIST in written:
        entries.append(
            CapabilityEntry(Capability.RESOURCE_LIST, links.resource_list_url(resource_set))
        )
    if capabilities.publish_change_list and Capability.CHANGE_LIST in written:
        entries.append(CapabilityEntry(Capability.CHANGE_LIST, links.change_list_url(resource_set)))
    for kind in written_dumps(resource_set):  # listed once written (and while still published)
        entries.append(CapabilityEntry(kind, links.dump_url(resource_set, kind)))
    if capabilities.publish_change_list and change_list_archive.archive_written(resource_set):
        url = links.change_list_archive_url(resource_set)
        entries.append(CapabilityEntry(Capability.CHANGE_LIST_ARCHIVE, url))
    entries += topics.capability_entries(resource_set)
    return build_capability_list(entries, source_description_url=links.source_description_url())


def written_dumps(resource_set: ResourceSet) -> list[str]:
    """The dumps the set publishes whose `resourcedump.xml` / `changedump.xml` is written."""
    capabilities = resource_set.capabilities
    wanted = [
        kind
        for kind, on in (
            (Capability.RESOURCE_DUMP, capabilities.publish_resource_dump),
            (Capability.CHANGE_DUMP, capabilities.publish_change_dump),
        )
        if on
    ]
    if not wanted:
        return []
    written = set(
        DumpDocument.objects.filter(resource_set=resource_set, number=0, kind__in=wanted)
        .exclude(storage_name="")
        .values_list("kind", flat=True)
    )
    return [kind for kind in wanted if kind in written]
