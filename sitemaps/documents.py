"""The two small documents built per request from the database."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from notifications import topics
from sources.models import ApiToken, ResourceSet

from . import links
from .builders import (
    CapabilityEntry,
    CapabilityListRef,
    build_capability_list,
    build_source_description,
)
from .constants import Capability


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


def capability_list(resource_set: ResourceSet) -> bytes:
    """One entry per capability the set publishes (and this portal implements)."""
    capabilities = resource_set.capabilities
    entries = []
    if capabilities.publish_resource_list:
        entries.append(
            CapabilityEntry(Capability.RESOURCE_LIST, links.resource_list_url(resource_set))
        )
    if capabilities.publish_change_list:
        entries.append(CapabilityEntry(Capability.CHANGE_LIST, links.change_list_url(resource_set)))
    entries += topics.capability_entries(resource_set)
    return build_capability_list(entries, source_description_url=links.source_description_url())
