"""Read-only views of a set's regeneration, for the admin: they never write."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, Exists, IntegerField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce

from sources.models import Change, ResourceSet

from . import planning
from .lease import lease_window
from .models import (
    ChangeListPage,
    ChangePackage,
    RegenerationState,
    ResourceListPage,
    ResourcePackage,
)


def _count(queryset: QuerySet) -> Coalesce:
    """A correlated COUNT(*) of `queryset` per set, 0 when it is empty."""
    counted = queryset.order_by().values("resource_set").annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted[:1], output_field=IntegerField()), 0)


def _dirty_pages() -> Coalesce:
    """Resource List pages whose key range holds a key a pending change touched."""
    pending = Change.objects.filter(
        resource_set=OuterRef("resource_set"),
        id__gt=OuterRef(OuterRef("regeneration_through")),
        resource_key__gt=OuterRef("after_key"),
    )
    bounded = pending.filter(resource_key__lte=OuterRef("through_key"))
    pages = ResourceListPage.objects.filter(resource_set=OuterRef("pk")).filter(
        Q(Exists(bounded), through_key__isnull=False) | Q(Exists(pending), through_key=None)
    )
    return _count(pages)


def annotated(resource_set: ResourceSet, name: str) -> int:
    """A count `with_regeneration_status` annotated on the set."""
    return int(getattr(resource_set, name))


def with_regeneration_status(queryset: QuerySet[ResourceSet]) -> QuerySet[ResourceSet]:
    """Sets with `resource_pages`, `change_pages`, `resource_dump_packages`, `change_dump_packages`
    (dump packages written), `pending` and `dirty_pages`, in one query."""
    return queryset.annotate(
        regeneration_through=Coalesce("regeneration_state__through_change_id", 0)
    ).annotate(
        resource_pages=_count(ResourceListPage.objects.filter(resource_set=OuterRef("pk"))),
        change_pages=_count(ChangeListPage.objects.filter(resource_set=OuterRef("pk"))),
        resource_dump_packages=_count(
            ResourcePackage.objects.filter(resource_set=OuterRef("pk")).exclude(storage_name="")
        ),
        change_dump_packages=_count(
            ChangePackage.objects.filter(resource_set=OuterRef("pk")).exclude(storage_name="")
        ),
        pending=_count(
            Change.objects.filter(
                resource_set=OuterRef("pk"), id__gt=OuterRef("regeneration_through")
            )
        ),
        dirty_pages=_dirty_pages(),
    )


def dirty_resource_pages(resource_set: ResourceSet) -> list[int]:
    """Numbers of the Resource List pages pending changes will rewrite."""
    pages = list(
        ResourceListPage.objects.filter(resource_set=resource_set).only("number", "after_key")
    )
    if not pages:
        return []
    through = (
        RegenerationState.objects.filter(resource_set=resource_set)
        .values_list("through_change_id", flat=True)
        .first()
    )
    keys = (
        Change.objects.filter(resource_set=resource_set, id__gt=through or 0)
        .exclude(resource_key=None)
        .values_list("resource_key", flat=True)
        .distinct()
    )
    starts = [page.after_key for page in pages]
    touched = (key for key in keys.iterator(chunk_size=planning.KEYS_PER_FETCH) if key is not None)
    dirty = planning.ranges_holding(starts, touched)
    return sorted(pages[position].number for position in dirty)


def lease_is_dead(state: RegenerationState, now: datetime) -> bool:
    """Whether a run that holds the set has stopped beating (the next run takes over)."""
    last_sign_of_life = state.heartbeat_at or state.running_since
    return last_sign_of_life is not None and last_sign_of_life < now - lease_window()
