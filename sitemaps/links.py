"""Absolute URLs of every published document, built from PUBLIC_BASE_URL."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from sources.models import ResourceSet


def absolute(path: str) -> str:
    return settings.PUBLIC_BASE_URL + path


def _set_url(name: str, resource_set: ResourceSet, **kwargs: object) -> str:
    return absolute(
        reverse(
            f"sitemaps:{name}",
            kwargs={
                "provider": resource_set.provider.slug,
                "set_slug": resource_set.slug,
                **kwargs,
            },
        )
    )


def source_description_url() -> str:
    return absolute(reverse("sitemaps:source-description"))


def capability_list_url(resource_set: ResourceSet) -> str:
    return _set_url("capability-list", resource_set)


def resource_list_url(resource_set: ResourceSet) -> str:
    return _set_url("resource-list", resource_set)


def resource_list_page_url(resource_set: ResourceSet, number: int) -> str:
    return _set_url("resource-list-page", resource_set, number=number)


def change_list_url(resource_set: ResourceSet) -> str:
    return _set_url("change-list", resource_set)


def change_list_page_url(resource_set: ResourceSet, number: int) -> str:
    return _set_url("change-list-page", resource_set, number=number)


def dump_url(resource_set: ResourceSet, kind: str) -> str:
    """`resourcedump.xml` or `changedump.xml` (a dump, or a dump index)."""
    return _set_url(kind, resource_set)


def dump_part_url(resource_set: ResourceSet, kind: str, number: int) -> str:
    """One dump under a dump index."""
    return _set_url(f"{kind}-part", resource_set, number=number)


def package_url(resource_set: ResourceSet, kind: str, number: int) -> str:
    """A dump's ZIP package."""
    return _set_url(f"{kind}-package", resource_set, number=number)


def manifest_url(resource_set: ResourceSet, kind: str, number: int) -> str:
    """The served copy of a package's `manifest.xml`."""
    return _set_url(f"{kind}-manifest", resource_set, number=number)


def change_list_archive_url(resource_set: ResourceSet) -> str:
    return _set_url("change-list-archive", resource_set)
